package sdbus

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"
)

// Values travel as plain Go values, one Go type per D-Bus type:
//
//	y byte   b bool      n int16  q uint16  i int32  u uint32
//	x int64  t uint64    d float64           h UnixFD
//	s string o ObjectPath g Signature        v Variant
//	a{kv} []DictEntry    a<t> []any          (…) Struct
//
// Encoding also takes []string and []uint32 for "as" and "au".

// ObjectPath is a D-Bus object path ("o").
type ObjectPath string

// Signature is a D-Bus type signature ("g").
type Signature string

// UnixFD is an index into the message's file descriptors ("h"). This
// client never passes descriptors; the type exists so that any message
// decodes.
type UnixFD uint32

// Variant is a value with its own signature ("v").
type Variant struct {
	Sig   Signature
	Value any
}

// Struct is the fields of a struct ("(…)").
type Struct []any

// DictEntry is one entry of a dictionary ("a{kv}").
type DictEntry struct {
	Key, Value any
}

// Limits from the D-Bus specification.
const (
	maxMessage   = 1 << 27 // whole message
	maxArray     = 1 << 26 // bytes of one array's elements
	maxSigLen    = 255
	maxNesting   = 32 // arrays, and separately structs, in one signature
	maxValueNest = 64 // total container depth of a value, variants included
)

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("sdbus: malformed message")

func malformed(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, a...)...)
}

// alignOf is the alignment of the type starting with c.
func alignOf(c byte) int {
	switch c {
	case 'n', 'q':
		return 2
	case 'b', 'i', 'u', 's', 'o', 'a', 'h':
		return 4
	case 'x', 't', 'd', '(', '{':
		return 8
	}
	return 1 // y g v
}

func isBasic(c byte) bool { return strings.IndexByte("ybnqiuxtdsogh", c) >= 0 }

// nextType returns the length of the single complete type at the start of
// sig, checking its syntax and nesting.
func nextType(sig string, arrays, structs int) (int, error) {
	if sig == "" {
		return 0, malformed("empty type")
	}
	c := sig[0]
	switch {
	case isBasic(c) || c == 'v':
		return 1, nil
	case c == 'a':
		if arrays+1 > maxNesting {
			return 0, malformed("arrays nested too deeply in %q", sig)
		}
		if len(sig) > 1 && sig[1] == '{' {
			if len(sig) < 3 || !isBasic(sig[2]) {
				return 0, malformed("dict key must be a basic type in %q", sig)
			}
			n, err := nextType(sig[3:], arrays+1, structs)
			if err != nil {
				return 0, err
			}
			if 3+n >= len(sig) || sig[3+n] != '}' {
				return 0, malformed("unterminated dict entry in %q", sig)
			}
			return 4 + n, nil
		}
		n, err := nextType(sig[1:], arrays+1, structs)
		return 1 + n, err
	case c == '(':
		if structs+1 > maxNesting {
			return 0, malformed("structs nested too deeply in %q", sig)
		}
		i := 1
		for i < len(sig) && sig[i] != ')' {
			n, err := nextType(sig[i:], arrays, structs+1)
			if err != nil {
				return 0, err
			}
			i += n
		}
		if i >= len(sig) {
			return 0, malformed("unterminated struct in %q", sig)
		}
		if i == 1 {
			return 0, malformed("empty struct in %q", sig)
		}
		return i + 1, nil
	}
	return 0, malformed("invalid type code %q", c)
}

// splitSignature splits sig into its complete types.
func splitSignature(sig string) ([]string, error) {
	if len(sig) > maxSigLen {
		return nil, malformed("signature longer than %d", maxSigLen)
	}
	var out []string
	for i := 0; i < len(sig); {
		n, err := nextType(sig[i:], 0, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, sig[i:i+n])
		i += n
	}
	return out, nil
}

// validObjectPath checks the object path grammar: "/" or "/a/b_c/D9".
func validObjectPath(p string) bool {
	if p == "/" {
		return true
	}
	if len(p) < 2 || p[0] != '/' || p[len(p)-1] == '/' {
		return false
	}
	prevSlash := true
	for i := 1; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '/':
			if prevSlash {
				return false
			}
			prevSlash = true
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_':
			prevSlash = false
		default:
			return false
		}
	}
	return true
}

// ---- encoding -----------------------------------------------------------------

// encoder appends little-endian D-Bus data to buf. Offsets for alignment
// count from the start of the message, so buf is the whole message so far.
type encoder struct {
	buf []byte
}

func (e *encoder) pad(n int) {
	for len(e.buf)%n != 0 {
		e.buf = append(e.buf, 0)
	}
}

func (e *encoder) u32(v uint32) {
	e.pad(4)
	e.buf = binary.LittleEndian.AppendUint32(e.buf, v)
}

func (e *encoder) str(s string) {
	e.u32(uint32(len(s)))
	e.buf = append(e.buf, s...)
	e.buf = append(e.buf, 0)
}

func (e *encoder) sig(s string) {
	e.buf = append(e.buf, byte(len(s)))
	e.buf = append(e.buf, s...)
	e.buf = append(e.buf, 0)
}

func typeErr(sig string, v any) error {
	return fmt.Errorf("sdbus: cannot encode %T as %q", v, sig)
}

// value encodes v as the single complete type sig.
func (e *encoder) value(sig string, v any, depth int) error {
	if depth > maxValueNest {
		return fmt.Errorf("sdbus: value nested deeper than %d", maxValueNest)
	}
	c := sig[0]
	e.pad(alignOf(c))
	ok := true
	switch c {
	case 'y':
		x, k := v.(byte)
		e.buf, ok = append(e.buf, x), k
	case 'b':
		x, k := v.(bool)
		b := uint32(0)
		if x {
			b = 1
		}
		e.u32(b)
		ok = k
	case 'n':
		x, k := v.(int16)
		e.buf, ok = binary.LittleEndian.AppendUint16(e.buf, uint16(x)), k
	case 'q':
		x, k := v.(uint16)
		e.buf, ok = binary.LittleEndian.AppendUint16(e.buf, x), k
	case 'i':
		x, k := v.(int32)
		e.u32(uint32(x))
		ok = k
	case 'u':
		x, k := v.(uint32)
		e.u32(x)
		ok = k
	case 'h':
		x, k := v.(UnixFD)
		e.u32(uint32(x))
		ok = k
	case 'x':
		x, k := v.(int64)
		e.buf, ok = binary.LittleEndian.AppendUint64(e.buf, uint64(x)), k
	case 't':
		x, k := v.(uint64)
		e.buf, ok = binary.LittleEndian.AppendUint64(e.buf, x), k
	case 'd':
		x, k := v.(float64)
		e.buf, ok = binary.LittleEndian.AppendUint64(e.buf, math.Float64bits(x)), k
	case 's':
		x, k := v.(string)
		if k && (!utf8.ValidString(x) || strings.IndexByte(x, 0) >= 0) {
			return fmt.Errorf("sdbus: string %q is not valid UTF-8 without NUL", x)
		}
		e.str(x)
		ok = k
	case 'o':
		x, k := v.(ObjectPath)
		if k && !validObjectPath(string(x)) {
			return fmt.Errorf("sdbus: invalid object path %q", x)
		}
		e.str(string(x))
		ok = k
	case 'g':
		x, k := v.(Signature)
		if k {
			if _, err := splitSignature(string(x)); err != nil {
				return err
			}
		}
		e.sig(string(x))
		ok = k
	case 'v':
		x, k := v.(Variant)
		if !k {
			return typeErr(sig, v)
		}
		types, err := splitSignature(string(x.Sig))
		if err != nil {
			return err
		}
		if len(types) != 1 {
			return fmt.Errorf("sdbus: variant signature %q is not one complete type", x.Sig)
		}
		e.sig(string(x.Sig))
		return e.value(string(x.Sig), x.Value, depth+1)
	case '(':
		x, k := v.(Struct)
		if !k {
			return typeErr(sig, v)
		}
		fields, err := splitSignature(sig[1 : len(sig)-1])
		if err != nil {
			return err
		}
		if len(fields) != len(x) {
			return fmt.Errorf("sdbus: struct %q wants %d fields, got %d", sig, len(fields), len(x))
		}
		for i, f := range fields {
			if err := e.value(f, x[i], depth+1); err != nil {
				return err
			}
		}
	case 'a':
		return e.array(sig, v, depth)
	default:
		return fmt.Errorf("sdbus: cannot encode type %q", sig)
	}
	if !ok {
		return typeErr(sig, v)
	}
	return nil
}

func (e *encoder) array(sig string, v any, depth int) error {
	elem := sig[1:]
	var items []any
	switch x := v.(type) {
	case []any:
		items = x
	case []string:
		for _, s := range x {
			items = append(items, s)
		}
	case []uint32:
		for _, u := range x {
			items = append(items, u)
		}
	case []DictEntry:
		for _, d := range x {
			items = append(items, d)
		}
	case []Struct:
		for _, s := range x {
			items = append(items, s)
		}
	default:
		return typeErr(sig, v)
	}
	e.u32(0) // length, patched below
	lenAt := len(e.buf) - 4
	e.pad(alignOf(elem[0]))
	start := len(e.buf)
	for _, it := range items {
		if elem[0] == '{' {
			d, ok := it.(DictEntry)
			if !ok {
				return typeErr(elem, it)
			}
			kv, err := splitSignature(elem[1 : len(elem)-1])
			if err != nil {
				return err
			}
			e.pad(8)
			if err := e.value(kv[0], d.Key, depth+1); err != nil {
				return err
			}
			if err := e.value(kv[1], d.Value, depth+1); err != nil {
				return err
			}
			continue
		}
		if err := e.value(elem, it, depth+1); err != nil {
			return err
		}
	}
	n := len(e.buf) - start
	if n > maxArray {
		return fmt.Errorf("sdbus: array of %d bytes exceeds %d", n, maxArray)
	}
	binary.LittleEndian.PutUint32(e.buf[lenAt:], uint32(n))
	return nil
}

// ---- decoding -----------------------------------------------------------------

// decoder reads D-Bus data of either byte order from buf, where offsets
// for alignment count from the start of the message.
type decoder struct {
	buf   []byte
	pos   int
	order binary.ByteOrder
}

func (d *decoder) align(n int) error {
	p := (d.pos + n - 1) / n * n
	if p > len(d.buf) {
		return malformed("truncated (padding at %d)", d.pos)
	}
	for _, b := range d.buf[d.pos:p] {
		if b != 0 {
			return malformed("non-zero padding at %d", d.pos)
		}
	}
	d.pos = p
	return nil
}

func (d *decoder) take(n int) ([]byte, error) {
	if n < 0 || n > len(d.buf)-d.pos {
		return nil, malformed("truncated at %d (want %d bytes)", d.pos, n)
	}
	b := d.buf[d.pos : d.pos+n]
	d.pos += n
	return b, nil
}

func (d *decoder) u32() (uint32, error) {
	if err := d.align(4); err != nil {
		return 0, err
	}
	b, err := d.take(4)
	if err != nil {
		return 0, err
	}
	return d.order.Uint32(b), nil
}

func (d *decoder) str() (string, error) {
	n, err := d.u32()
	if err != nil {
		return "", err
	}
	if n > maxMessage {
		return "", malformed("string length %d", n)
	}
	b, err := d.take(int(n) + 1)
	if err != nil {
		return "", err
	}
	s := string(b[:n])
	if b[n] != 0 || strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s) {
		return "", malformed("bad string at %d", d.pos)
	}
	return s, nil
}

func (d *decoder) sig() (string, error) {
	b, err := d.take(1)
	if err != nil {
		return "", err
	}
	n := int(b[0])
	s, err := d.take(n + 1)
	if err != nil {
		return "", err
	}
	if s[n] != 0 {
		return "", malformed("signature not NUL-terminated")
	}
	if _, err := splitSignature(string(s[:n])); err != nil {
		return "", err
	}
	return string(s[:n]), nil
}

// value decodes one value of the single complete type sig, which the
// caller has validated.
func (d *decoder) value(sig string, depth int) (any, error) {
	if depth > maxValueNest {
		return nil, malformed("value nested deeper than %d", maxValueNest)
	}
	c := sig[0]
	if err := d.align(alignOf(c)); err != nil {
		return nil, err
	}
	switch c {
	case 'y':
		b, err := d.take(1)
		if err != nil {
			return nil, err
		}
		return b[0], nil
	case 'b':
		v, err := d.u32()
		if err != nil {
			return nil, err
		}
		if v > 1 {
			return nil, malformed("boolean %d", v)
		}
		return v == 1, nil
	case 'n', 'q':
		b, err := d.take(2)
		if err != nil {
			return nil, err
		}
		if c == 'n' {
			return int16(d.order.Uint16(b)), nil
		}
		return d.order.Uint16(b), nil
	case 'i', 'u', 'h':
		v, err := d.u32()
		if err != nil {
			return nil, err
		}
		switch c {
		case 'i':
			return int32(v), nil
		case 'h':
			return UnixFD(v), nil
		}
		return v, nil
	case 'x', 't', 'd':
		b, err := d.take(8)
		if err != nil {
			return nil, err
		}
		v := d.order.Uint64(b)
		switch c {
		case 'x':
			return int64(v), nil
		case 'd':
			return math.Float64frombits(v), nil
		}
		return v, nil
	case 's':
		return d.str()
	case 'o':
		s, err := d.str()
		if err != nil {
			return nil, err
		}
		if !validObjectPath(s) {
			return nil, malformed("invalid object path %q", s)
		}
		return ObjectPath(s), nil
	case 'g':
		s, err := d.sig()
		return Signature(s), err
	case 'v':
		s, err := d.sig()
		if err != nil {
			return nil, err
		}
		types, _ := splitSignature(s) // checked by sig
		if len(types) != 1 {
			return nil, malformed("variant signature %q is not one complete type", s)
		}
		v, err := d.value(s, depth+1)
		if err != nil {
			return nil, err
		}
		return Variant{Sig: Signature(s), Value: v}, nil
	case '(':
		fields, _ := splitSignature(sig[1 : len(sig)-1])
		st := make(Struct, 0, len(fields))
		for _, f := range fields {
			v, err := d.value(f, depth+1)
			if err != nil {
				return nil, err
			}
			st = append(st, v)
		}
		return st, nil
	case 'a':
		return d.array(sig, depth)
	}
	return nil, malformed("invalid type %q", sig)
}

func (d *decoder) array(sig string, depth int) (any, error) {
	n, err := d.u32()
	if err != nil {
		return nil, err
	}
	if n > maxArray {
		return nil, malformed("array of %d bytes", n)
	}
	elem := sig[1:]
	if err := d.align(alignOf(elem[0])); err != nil {
		return nil, err
	}
	end := d.pos + int(n)
	if end > len(d.buf) {
		return nil, malformed("array runs past the end")
	}
	if elem[0] == '{' {
		kv, _ := splitSignature(elem[1 : len(elem)-1])
		entries := []DictEntry{}
		for d.pos < end {
			if err := d.align(8); err != nil {
				return nil, err
			}
			k, err := d.value(kv[0], depth+1)
			if err != nil {
				return nil, err
			}
			v, err := d.value(kv[1], depth+1)
			if err != nil {
				return nil, err
			}
			entries = append(entries, DictEntry{Key: k, Value: v})
		}
		if d.pos != end {
			return nil, malformed("dict overruns its length")
		}
		return entries, nil
	}
	items := []any{}
	for d.pos < end {
		v, err := d.value(elem, depth+1)
		if err != nil {
			return nil, err
		}
		items = append(items, v)
	}
	if d.pos != end {
		return nil, malformed("array overruns its length")
	}
	return items, nil
}
