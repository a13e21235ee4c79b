package sdbus

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// unhex decodes a hex string written with spaces and | separators.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.NewReplacer(" ", "", "|", "", "\n", "", "\t", "").Replace(s))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Values and their little-endian encodings, worked out by hand from the
// marshalling rules of the D-Bus specification (alignment counted from
// offset 0, array lengths exclude the padding before the first element).
var valueCases = []struct {
	name string
	sig  string
	v    any
	hex  string
}{
	{"byte", "y", byte(0x2a), "2a"},
	{"boolean true", "b", true, "01000000"},
	{"int16", "n", int16(-2), "feff"},
	{"uint32", "u", uint32(0x01020304), "04030201"},
	{"int64", "x", int64(-1), "ffffffffffffffff"},
	{"string", "s", "foo", "03000000 666f6f 00"},
	{"empty string", "s", "", "00000000 00"},
	{"object path", "o", ObjectPath("/a/b"), "04000000 2f612f62 00"},
	{"signature", "g", Signature("ai"), "02 6169 00"},
	// The spec's own example: an empty array of int64 still pads to 8.
	{"empty ax", "ax", []any{}, "00000000 | 00000000"},
	{"ax", "ax", []any{int64(5)}, "08000000 | 00000000 | 0500000000000000"},
	{"au", "au", []any{uint32(1), uint32(2)}, "08000000 01000000 02000000"},
	{"as", "as", []any{"a", "bc"}, "0f000000 | 01000000 6100 | 0000 | 02000000 626300"},
	// Variant: signature "u", one byte of padding to 4, the value.
	{"variant u", "v", Variant{Sig: "u", Value: uint32(7)}, "01 75 00 | 00 | 07000000"},
	{"struct (yu)", "(yu)", Struct{byte(1), uint32(2)}, "01 000000 02000000"},
	{"a{sv}", "a{sv}", []DictEntry{{Key: "k", Value: Variant{Sig: "b", Value: true}}},
		"10000000 | 00000000 | 01000000 6b00 | 01 62 00 | 000000 | 01000000"},
	{"a(sv) as StartTransientUnit sends it", "a(sv)",
		[]any{Struct{"Delegate", Variant{Sig: "b", Value: true}}},
		"14000000 | 00000000 | 08000000 44656c6567617465 00 | 01 62 00 | 01000000"},
}

func TestValueEncoding(t *testing.T) {
	for _, tc := range valueCases {
		t.Run(tc.name, func(t *testing.T) {
			want := unhex(t, tc.hex)
			var e encoder
			if err := e.value(tc.sig, tc.v, 0); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(e.buf, want) {
				t.Fatalf("encode %s %#v:\n got % x\nwant % x", tc.sig, tc.v, e.buf, want)
			}
			d := decoder{buf: want, order: binary.LittleEndian}
			got, err := d.value(tc.sig, 0)
			if err != nil {
				t.Fatal(err)
			}
			if d.pos != len(want) {
				t.Fatalf("decode consumed %d of %d bytes", d.pos, len(want))
			}
			if !reflect.DeepEqual(got, tc.v) {
				t.Fatalf("decode: got %#v, want %#v", got, tc.v)
			}
		})
	}
}

// helloLibdbus is the Hello call as libdbus sends it (fields in the order
// path, destination, interface, member), as seen on the wire.
const helloLibdbus = `6c 01 00 01 00000000 01000000 6e000000
01 01 6f 00 15000000 2f6f72672f667265656465736b746f702f44427573 00 | 0000
06 01 73 00 14000000 6f72672e667265656465736b746f702e44427573 00 | 000000
02 01 73 00 14000000 6f72672e667265656465736b746f702e44427573 00 | 000000
03 01 73 00 05000000 48656c6c6f 00 | 0000`

// helloOurs is the same call as Marshal lays it out (path, interface,
// member, destination): the fields end at 125 instead of 126, since the
// padding between them falls differently.
const helloOurs = `6c 01 00 01 00000000 01000000 6d000000
01 01 6f 00 15000000 2f6f72672f667265656465736b746f702f44427573 00 | 0000
02 01 73 00 14000000 6f72672e667265656465736b746f702e44427573 00 | 000000
03 01 73 00 05000000 48656c6c6f 00 | 0000
06 01 73 00 14000000 6f72672e667265656465736b746f702e44427573 00 | 000000`

func helloMessage() *Message {
	return &Message{
		Type: TypeMethodCall, Serial: 1, Path: "/org/freedesktop/DBus",
		Interface: "org.freedesktop.DBus", Member: "Hello", Destination: "org.freedesktop.DBus",
	}
}

func TestHelloWire(t *testing.T) {
	want := unhex(t, helloOurs)
	got, err := helloMessage().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Hello:\n got % x\nwant % x", got, want)
	}
	for _, h := range []string{helloOurs, helloLibdbus} {
		b := unhex(t, h)
		m, err := Unmarshal(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m, helloMessage()) {
			t.Fatalf("decoded %#v", m)
		}
	}
}

// jobRemovedLE is a JobRemoved signal "uoss" (42, /org/freedesktop/systemd1/job/42,
// "a.scope", "done"), built by hand.
func jobRemovedLE(t testing.TB) []byte {
	return unhex(t, `6c 04 01 01 41000000 07000000 7a000000
01 01 6f 00 19000000 2f6f72672f667265656465736b746f702f73797374656d6431 00 | 000000000000
02 01 73 00 20000000 6f72672e667265656465736b746f702e73797374656d64312e4d616e61676572 00 | 00000000000000
03 01 73 00 0a000000 4a6f6252656d6f766564 00 | 0000000000
08 01 67 00 04 756f7373 00 | 000000000000
2a000000
20000000 2f6f72672f667265656465736b746f702f73797374656d64312f6a6f622f3432 00 | 000000
07000000 612e73636f7065 00
04000000 646f6e65 00`)
}

func TestJobRemovedWire(t *testing.T) {
	b := jobRemovedLE(t)
	m, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	want := &Message{
		Type: TypeSignal, Flags: FlagNoReplyExpected, Serial: 7, Path: systemdPath, Interface: managerIface,
		Member: "JobRemoved", Signature: "uoss",
		Body: []any{uint32(42), ObjectPath("/org/freedesktop/systemd1/job/42"), "a.scope", "done"},
	}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("got  %#v\nwant %#v", m, want)
	}
	again, err := want.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, b) {
		t.Fatalf("re-encoded:\n got % x\nwant % x", again, b)
	}
}

// TestBigEndian: a peer may send big-endian messages.
func TestBigEndian(t *testing.T) {
	b := unhex(t, `42 02 00 01 0000000c 00000002 00000010
05 01 75 00 00000001 | 08 01 67 00 02 7573 00
00000009 00000003 616263 00`)
	m, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	want := &Message{Type: TypeMethodReturn, Serial: 2, ReplySerial: 1, Signature: "us", Body: []any{uint32(9), "abc"}}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("got %#v", m)
	}
}

func TestStartTransientUnitRoundTrip(t *testing.T) {
	m := &Message{
		Type: TypeMethodCall, Serial: 3, Destination: systemdName, Path: systemdPath, Interface: managerIface,
		Member: "StartTransientUnit", Signature: "ssa(sv)a(sa(sv))",
		Body: []any{"agentrun-x.scope", "fail", []any{
			Struct{"PIDs", Variant{Sig: "au", Value: []any{uint32(1234)}}},
			Struct{"Delegate", Variant{Sig: "b", Value: true}},
			Struct{"Description", Variant{Sig: "s", Value: "d"}},
		}, []any{}},
	}
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip:\n got %#v\nwant %#v", got, m)
	}
	// The aux array a(sa(sv)) is empty: its length 0, then padding to 8.
	if !bytes.HasSuffix(b, []byte{0, 0, 0, 0}) || len(b)%8 != 0 {
		t.Fatalf("unexpected tail % x", b[len(b)-16:])
	}
}

func TestSignatures(t *testing.T) {
	good := []string{"", "y", "a{sv}", "ssa(sv)a(sa(sv))", "uoss", "(i(ii))", "aav", strings.Repeat("a", 32) + "y"}
	for _, s := range good {
		if _, err := splitSignature(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	bad := []string{"a", "(", "()", "(i", "a{vs}", "{sv}", "a{s}", "a{svv}", "z", strings.Repeat("a", 33) + "y",
		strings.Repeat("(", 33) + "y" + strings.Repeat(")", 33), strings.Repeat("y", 256)}
	for _, s := range bad {
		if _, err := splitSignature(s); err == nil {
			t.Errorf("%q: accepted", s)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	good := unhex(t, helloOurs)
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := map[string][]byte{
		"empty":            {},
		"short header":     good[:10],
		"truncated":        good[:len(good)-1],
		"trailing":         append(bytes.Clone(good), 0),
		"bad byte order":   mutate(func(b []byte) []byte { b[0] = 'x'; return b }),
		"version 2":        mutate(func(b []byte) []byte { b[3] = 2; return b }),
		"serial 0":         mutate(func(b []byte) []byte { b[8] = 0; return b }),
		"unknown type":     mutate(func(b []byte) []byte { b[1] = 9; return b }),
		"non-zero padding": mutate(func(b []byte) []byte { b[len(b)-1] = 1; return b }),
		"path not o":       mutate(func(b []byte) []byte { b[18] = 's'; return b }),
		"bad object path":  mutate(func(b []byte) []byte { b[24] = 'x'; return b }),
		"huge field array": mutate(func(b []byte) []byte { b[12], b[15] = 0xff, 0x03; return b }),
		"string no NUL":    mutate(func(b []byte) []byte { b[45] = 'x'; return b }),
	}
	for name, b := range cases {
		if _, err := Unmarshal(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: want ErrMalformed, got %v", name, err)
		}
	}
	if _, err := Unmarshal(good); err != nil {
		t.Fatalf("the unmutated message: %v", err)
	}
}

func TestMarshalRejects(t *testing.T) {
	base := func() *Message { return helloMessage() }
	bad := map[string]*Message{
		"serial 0":       func() *Message { m := base(); m.Serial = 0; return m }(),
		"no member":      func() *Message { m := base(); m.Member = ""; return m }(),
		"body mismatch":  func() *Message { m := base(); m.Signature = "s"; return m }(),
		"wrong Go type":  func() *Message { m := base(); m.Signature = "u"; m.Body = []any{int32(1)}; return m }(),
		"bad path":       func() *Message { m := base(); m.Path = "/a//b"; return m }(),
		"NUL in string":  func() *Message { m := base(); m.Signature = "s"; m.Body = []any{"a\x00b"}; return m }(),
		"variant of two": func() *Message { m := base(); m.Signature = "v"; m.Body = []any{Variant{Sig: "uu"}}; return m }(),
	}
	for name, m := range bad {
		if _, err := m.Marshal(); err == nil {
			t.Errorf("%s: marshalled", name)
		}
	}
}

// FuzzUnmarshal: any input decodes or fails with an error, never panics;
// whatever decodes re-encodes, and the re-encoding decodes to the same
// encoding again.
func FuzzUnmarshal(f *testing.F) {
	f.Add(unhex(f, helloOurs))
	f.Add(unhex(f, helloLibdbus))
	f.Add(jobRemovedLE(f))
	for _, m := range []*Message{
		{Type: TypeError, Serial: 5, ReplySerial: 4, ErrorName: ErrNoSuchUnit, Signature: "s", Body: []any{"Unit x.scope not loaded."}},
		{Type: TypeMethodReturn, Serial: 6, ReplySerial: 2, Signature: "o", Body: []any{ObjectPath("/org/freedesktop/systemd1/job/7")}},
		{Type: TypeMethodReturn, Serial: 7, ReplySerial: 3, Signature: "v", Body: []any{Variant{Sig: "s", Value: "/user.slice"}}},
		{Type: TypeMethodReturn, Serial: 8, ReplySerial: 3, Signature: "a{sv}(yqnx)ad", Body: []any{
			[]DictEntry{{Key: "a", Value: Variant{Sig: "av", Value: []any{Variant{Sig: "t", Value: uint64(1)}}}}},
			Struct{byte(1), uint16(2), int16(-3), int64(4)}, []any{1.5}}},
	} {
		b, err := m.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Unmarshal(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		b, err := m.Marshal()
		if err != nil {
			t.Fatalf("decoded message does not re-encode: %v\n%#v", err, m)
		}
		m2, err := Unmarshal(b)
		if err != nil {
			t.Fatalf("re-encoding does not decode: %v", err)
		}
		b2, err := m2.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, b2) {
			t.Fatalf("re-encoding is not stable:\n% x\n% x", b, b2)
		}
	})
}
