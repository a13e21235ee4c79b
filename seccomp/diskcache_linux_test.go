//go:build linux && cgo

package seccomp

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestDiskCache(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "seccomp")
	p := DefaultProfile()
	first, err := (&DiskCache{Dir: dir}).Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(entries) != 1 {
		t.Fatalf("want one cache entry, got %v", entries)
	}
	again, err := (&DiskCache{Dir: dir}).Compile(p)
	if err != nil || !bytes.Equal(again.Filter, first.Filter) || again.Flags != first.Flags {
		t.Fatalf("a fresh process must get the same program from disk: %v", err)
	}

	// An entry we wrote ourselves is used: prove it by planting one.
	planted := []byte(`{"filter":"BgAAAAAA/38=","flags":0}`) // one RET ALLOW
	if err := os.WriteFile(entries[0], planted, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := (&DiskCache{Dir: dir}).Compile(p)
	if err != nil || len(got.Filter) != 8 {
		t.Fatalf("the private entry was not read from disk (len %d, %v)", len(got.Filter), err)
	}
	// The same entry writable by others is never trusted.
	if err := os.Chmod(entries[0], 0o666); err != nil {
		t.Fatal(err)
	}
	got, err = (&DiskCache{Dir: dir}).Compile(p)
	if err != nil || !bytes.Equal(got.Filter, first.Filter) {
		t.Fatalf("a world-writable entry was trusted (len %d, %v)", len(got.Filter), err)
	}
	// Garbage is recompiled, not loaded.
	if err := os.WriteFile(entries[0], []byte(`{"filter":"AAA="}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(entries[0], 0o600); err != nil {
		t.Fatal(err)
	}
	got, err = (&DiskCache{Dir: dir}).Compile(p)
	if err != nil || !bytes.Equal(got.Filter, first.Filter) {
		t.Fatalf("a malformed entry was used (len %d, %v)", len(got.Filter), err)
	}
}

func BenchmarkDiskCacheHit(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "seccomp")
	p := DefaultProfile()
	if _, err := (&DiskCache{Dir: dir}).Compile(p); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := (&DiskCache{Dir: dir}).Compile(p); err != nil {
			b.Fatal(err)
		}
	}
}
