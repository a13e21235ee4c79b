//go:build linux && cgo

package cinit

import (
	"bytes"
	"encoding/binary"
	"hash/fnv"
	"testing"

	"github.com/agentrun/agentrun/mounts"
)

// fullPlan uses every kind of entry a plan can hold.
func fullPlan() (*Plan, []Prep, IDMaps) {
	p := &Plan{
		CgroupFD: -1, FDs: []int{0, 1, 2, -1, -1, -1}, SyncFD: 3,
		UID: 1000, GID: 1000, DropGroups: true, ExpectPPID: PPIDSelf, UnshareCgroupNS: true,
		CloneFlags: 0x7e020000, Hostname: "sandbox",
		Mounts: []Mount{
			{Kind: FS, Type: "tmpfs", Dest: "/", Source: "tmpfs", FD: -1, Params: []FSParam{{Key: "size", Value: "1m"}, {Key: "ro", Flag: true}}},
			{Kind: Bind, Type: "bind", Dest: "/usr", Source: "/usr", FD: -1, Recursive: true, Attr: 1},
			{Kind: Bind, Type: "bind", Dest: "/workspace", Source: "/tmp/ws", FD: 4},
			{Kind: Symlink, Type: "symlink", Dest: "/bin", Source: "usr/bin", FD: -1},
			{Kind: Copy, Type: mounts.TypeCopy, Dest: "/etc/passwd", Source: "/etc/passwd", FD: -1},
		},
		Devices:  []Device{{Path: "/dev/null", Dest: "/dev/null"}},
		Masked:   []string{"/proc/kcore", "/proc/keys"},
		Readonly: []string{"/proc/sys"},
		Loopback: true, RootReadonly: true,
		Cwd:     "/workspace",
		Rlimits: []Rlimit{{Name: "RLIMIT_NOFILE", Resource: 7, Soft: 1024, Hard: 1024}},
		Env:     []string{"PATH=/usr/bin:/bin", "HOME=/tmp"},
		Path:    "/usr/bin:/bin", NoNewPrivs: true, KeepCaps: 1 << 13,
	}
	preps := []Prep{
		{Source: "/tmp/ws", UIDMap: "1000 2147418112 1\n", GIDMap: "1000 2147418112 1\n", Attr: 0x100000, FDIndex: 4},
		{Source: "/run/agentrun/template-locks/0123.lock", FDIndex: 5, Template: true},
	}
	ids := IDMaps{Setgroups: "allow", UIDMap: "1000 2147418112 1\n", GIDMap: "1000 2147418112 1\n"}
	return p, preps, ids
}

func testImage(t testing.TB) []byte {
	t.Helper()
	p, preps, ids := fullPlan()
	img, err := Image(p, preps, ids, []byte("key\x00with\x00nuls"), Exe{1, 2, 3, 4, 5})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestImageLoads: the C loader accepts what Image writes, and Image is
// deterministic, which the adoption check (byte equality) relies on.
func TestImageLoads(t *testing.T) {
	img := testImage(t)
	if err := LoadImage(img, true); err != nil {
		t.Fatalf("loader rejects a fresh image: %v", err)
	}
	if again := testImage(t); !bytes.Equal(img, again) {
		t.Fatal("two images of the same plan differ")
	}
	p, preps, ids := fullPlan()
	p.Env = append(p.Env, "TERM=dumb")
	other, err := Image(p, preps, ids, []byte("key\x00with\x00nuls"), Exe{1, 2, 3, 4, 5})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(img, other) {
		t.Fatal("images of different plans are equal")
	}
}

// TestImageChecksum: any changed byte fails the checksum.
func TestImageChecksum(t *testing.T) {
	img := testImage(t)
	for i := range img {
		bad := bytes.Clone(img)
		bad[i] ^= 0x01
		if LoadImage(bad, true) == nil {
			t.Fatalf("byte %d flipped: image accepted", i)
		}
	}
}

// TestImageUnlistedPointer: a pointer the reloc list leaves out keeps its
// small offset, which the loader must find outside the image.
func TestImageUnlistedPointer(t *testing.T) {
	img := testImage(t)
	const relocsAt, nrelocsAt = 64, 72 // struct ar_image
	n := binary.NativeEndian.Uint64(img[nrelocsAt:])
	if n < 10 {
		t.Fatalf("only %d relocations", n)
	}
	for drop := uint64(0); drop < n; drop++ {
		bad := bytes.Clone(img)
		rel := binary.NativeEndian.Uint64(bad[relocsAt:])
		// Move the last entry into the dropped one's slot.
		last := bad[rel+8*(n-1) : rel+8*n]
		copy(bad[rel+8*drop:], last)
		binary.NativeEndian.PutUint64(bad[nrelocsAt:], n-1)
		if LoadImage(bad, false) == nil {
			t.Errorf("relocation %d of %d dropped: image accepted", drop, n)
		}
	}
}

// TestImageSizes: truncated and padded images are refused.
func TestImageSizes(t *testing.T) {
	img := testImage(t)
	for _, n := range []int{1, 8, 64, len(img) / 2, len(img) - 16} {
		if LoadImage(img[:n], false) == nil {
			t.Errorf("image cut to %d bytes accepted", n)
		}
	}
	if LoadImage(append(bytes.Clone(img), make([]byte, 16)...), false) == nil {
		t.Error("image with 16 bytes appended accepted")
	}
}

// FuzzLoadImage: whatever the bytes, the loader (checksum off, so that
// the structural checks see them) returns instead of crashing. A crash in
// the constructor would take the CLI down.
func FuzzLoadImage(f *testing.F) {
	img := testImage(f)
	f.Add(img)
	f.Add(img[:len(img)/2])
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		_ = LoadImage(b, false)
		// With a valid checksum too, as a file a bug could have written.
		if len(b) >= 24 {
			c := bytes.Clone(b)
			binary.NativeEndian.PutUint64(c[16:], 0)
			h := fnv.New64a()
			h.Write(c)
			binary.NativeEndian.PutUint64(c[16:], h.Sum64())
			_ = LoadImage(c, true)
		}
	})
}

// TestImageNeedsOwnNamespaces: an image whose init would share the host's
// user or mount namespace is refused, whoever wrote it.
func TestImageNeedsOwnNamespaces(t *testing.T) {
	for _, drop := range []uint64{0x10000000, 0x20000} { // CLONE_NEWUSER, CLONE_NEWNS
		p, preps, ids := fullPlan()
		p.CloneFlags &^= drop
		img, err := Image(p, preps, ids, []byte("k"), Exe{})
		if err != nil {
			t.Fatal(err)
		}
		if LoadImage(img, true) == nil {
			t.Errorf("clone flags %#x (without %#x): image accepted", p.CloneFlags, drop)
		}
	}
}

// TestImageRelocOutsidePointers: a relocation aimed at the header's own
// fields (the list's length among them) or at the list is refused.
func TestImageRelocOutsidePointers(t *testing.T) {
	img := testImage(t)
	const relocsAt, nrelocsAt = 64, 72
	rel := binary.NativeEndian.Uint64(img[relocsAt:])
	for _, target := range []uint64{8, 16, nrelocsAt, rel} {
		bad := bytes.Clone(img)
		binary.NativeEndian.PutUint64(bad[rel:], target)
		if LoadImage(bad, false) == nil {
			t.Errorf("relocation of offset %d: image accepted", target)
		}
	}
}

// BenchmarkImage is the Go side's cost of a prestart check: encoding this
// spawn's plan to compare with the image.
func BenchmarkImage(b *testing.B) {
	p, preps, ids := fullPlan()
	for b.Loop() {
		if _, err := Image(p, preps, ids, []byte("key"), Exe{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadImage is the constructor's validation and relocation of an
// image (with a copy, as LoadImage makes one).
func BenchmarkLoadImage(b *testing.B) {
	img := testImage(b)
	for b.Loop() {
		if err := LoadImage(img, true); err != nil {
			b.Fatal(err)
		}
	}
}

// TestImageNamespaceFlagsOnly: an image whose clone flags ask for more than
// new namespaces (shared memory, files, handlers or thread group with the
// caller) is refused: the init must be a process of its own.
func TestImageNamespaceFlagsOnly(t *testing.T) {
	// CLONE_VM, CLONE_FS, CLONE_FILES, CLONE_SIGHAND, CLONE_THREAD, CLONE_PARENT
	for _, add := range []uint64{0x100, 0x200, 0x400, 0x800, 0x10000, 0x8000} {
		p, preps, ids := fullPlan()
		p.CloneFlags |= add
		img, err := Image(p, preps, ids, []byte("k"), Exe{})
		if err != nil {
			t.Fatal(err)
		}
		if LoadImage(img, true) == nil {
			t.Errorf("clone flags %#x (with %#x): image accepted", p.CloneFlags, add)
		}
	}
	// Positive control: the namespace flags alone load.
	p, preps, ids := fullPlan()
	img, err := Image(p, preps, ids, []byte("k"), Exe{})
	if err != nil {
		t.Fatal(err)
	}
	if err := LoadImage(img, true); err != nil {
		t.Errorf("clone flags %#x: %v", p.CloneFlags, err)
	}
}
