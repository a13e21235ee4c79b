//go:build linux && cgo

package seccomp

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestDiskCache(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "seccomp")
	p := DefaultProfile()
	first, err := (&DiskCache{Dir: dir}).Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := filepath.Glob(filepath.Join(dir, "*"+diskExt))
	if len(entries) != 1 {
		t.Fatalf("want one cache entry, got %v", entries)
	}
	again, err := (&DiskCache{Dir: dir}).Compile(p)
	if err != nil || !bytes.Equal(again.Filter, first.Filter) || again.Flags != first.Flags {
		t.Fatalf("a fresh process must get the same program from disk: %v", err)
	}

	// An entry we wrote ourselves is used: prove it by planting one.
	planted := encodeEntry(&Program{Filter: []byte{6, 0, 0, 0, 0, 0, 0xff, 0x7f}}) // one RET ALLOW
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
	if err := os.WriteFile(entries[0], planted[:len(planted)-3], 0o600); err != nil {
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

func TestDiskEntryRoundTrip(t *testing.T) {
	prog, err := Compile(DefaultProfile())
	if err != nil {
		t.Fatal(err)
	}
	prog.Skipped = []string{"futex_waitv", "map_shadow_stack"}
	prog.names = map[uint64]string{nameKey(0xc000003e, 165): "mount", nameKey(0xc000003e, 101): "ptrace"}
	got, err := decodeEntry(encodeEntry(prog))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Filter, prog.Filter) || got.Flags != prog.Flags || !slices.Equal(got.Skipped, prog.Skipped) || !maps.Equal(got.names, prog.names) {
		t.Fatalf("round trip changed the program: %+v", got)
	}
}

func FuzzDecodeEntry(f *testing.F) {
	good := encodeEntry(&Program{Filter: []byte{6, 0, 0, 0, 0, 0, 0xff, 0x7f}, Skipped: []string{"x"}, names: map[uint64]string{1: "read"}})
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add([]byte("ARSC"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		prog, err := decodeEntry(b)
		if err != nil {
			return
		}
		// Whatever decodes must be a loadable shape and encode back to the
		// same bytes when it holds at most one name (map order).
		if len(prog.Filter) == 0 || len(prog.Filter)%8 != 0 || len(prog.Filter) > maxFilterBytes {
			t.Fatalf("accepted a filter of %d bytes", len(prog.Filter))
		}
		if len(prog.names) <= 1 && !bytes.Equal(encodeEntry(prog), b) {
			t.Fatalf("decode/encode mismatch")
		}
	})
}
