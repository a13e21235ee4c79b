package sdbus

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Type is a message type.
type Type byte

const (
	TypeMethodCall   Type = 1
	TypeMethodReturn Type = 2
	TypeError        Type = 3
	TypeSignal       Type = 4
)

func (t Type) String() string {
	switch t {
	case TypeMethodCall:
		return "method call"
	case TypeMethodReturn:
		return "method return"
	case TypeError:
		return "error"
	case TypeSignal:
		return "signal"
	}
	return fmt.Sprintf("type %d", byte(t))
}

// Flags of a message header.
const (
	FlagNoReplyExpected byte = 0x1
	FlagNoAutoStart     byte = 0x2
)

// Header field codes.
const (
	fieldPath        = 1
	fieldInterface   = 2
	fieldMember      = 3
	fieldErrorName   = 4
	fieldReplySerial = 5
	fieldDestination = 6
	fieldSender      = 7
	fieldSignature   = 8
	fieldUnixFDs     = 9
)

// Message is one D-Bus message. Body holds one value per complete type of
// Signature (see the type mapping in wire.go).
type Message struct {
	Type        Type
	Flags       byte
	Serial      uint32
	Path        ObjectPath
	Interface   string
	Member      string
	ErrorName   string
	ReplySerial uint32
	Destination string
	Sender      string
	Signature   Signature
	UnixFDs     uint32
	Body        []any
}

// check enforces the header fields each type requires.
func (m *Message) check() error {
	if m.Serial == 0 {
		return malformed("serial 0")
	}
	switch m.Type {
	case TypeMethodCall:
		if m.Path == "" || m.Member == "" {
			return malformed("method call without path or member")
		}
	case TypeMethodReturn:
		if m.ReplySerial == 0 {
			return malformed("method return without reply serial")
		}
	case TypeError:
		if m.ReplySerial == 0 || m.ErrorName == "" {
			return malformed("error without reply serial or name")
		}
	case TypeSignal:
		if m.Path == "" || m.Interface == "" || m.Member == "" {
			return malformed("signal without path, interface or member")
		}
	default:
		return malformed("unknown message type %d", m.Type)
	}
	return nil
}

// Marshal encodes m in little-endian byte order.
func (m *Message) Marshal() ([]byte, error) {
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("sdbus: marshal: %w", err)
	}
	types, err := splitSignature(string(m.Signature))
	if err != nil {
		return nil, fmt.Errorf("sdbus: marshal: %w", err)
	}
	if len(types) != len(m.Body) {
		return nil, fmt.Errorf("sdbus: marshal: signature %q has %d values, body %d", m.Signature, len(types), len(m.Body))
	}
	// The body aligns from its own start, which is 8-aligned in the
	// message, so encode it separately.
	body := encoder{}
	for i, t := range types {
		if err := body.value(t, m.Body[i], 0); err != nil {
			return nil, fmt.Errorf("sdbus: marshal: %w", err)
		}
	}
	var fields []any
	add := func(code byte, sig Signature, v any) {
		fields = append(fields, Struct{code, Variant{Sig: sig, Value: v}})
	}
	if m.Path != "" {
		add(fieldPath, "o", m.Path)
	}
	if m.Interface != "" {
		add(fieldInterface, "s", m.Interface)
	}
	if m.Member != "" {
		add(fieldMember, "s", m.Member)
	}
	if m.ErrorName != "" {
		add(fieldErrorName, "s", m.ErrorName)
	}
	if m.ReplySerial != 0 {
		add(fieldReplySerial, "u", m.ReplySerial)
	}
	if m.Destination != "" {
		add(fieldDestination, "s", m.Destination)
	}
	if m.Sender != "" {
		add(fieldSender, "s", m.Sender)
	}
	if m.Signature != "" {
		add(fieldSignature, "g", m.Signature)
	}
	if m.UnixFDs != 0 {
		add(fieldUnixFDs, "u", m.UnixFDs)
	}
	e := encoder{buf: make([]byte, 0, 128+len(body.buf))}
	e.buf = append(e.buf, 'l', byte(m.Type), m.Flags, 1)
	e.u32(uint32(len(body.buf)))
	e.u32(m.Serial)
	if err := e.value("a(yv)", fields, 0); err != nil {
		return nil, fmt.Errorf("sdbus: marshal: %w", err)
	}
	e.pad(8)
	if len(e.buf)+len(body.buf) > maxMessage {
		return nil, fmt.Errorf("sdbus: marshal: message exceeds %d bytes", maxMessage)
	}
	return append(e.buf, body.buf...), nil
}

// headerLen is the fixed part of a header: byte order, type, flags,
// version, body length, serial, and the length of the field array.
const headerLen = 16

// messageLen reads the total length of the message whose first 16 bytes
// are hdr.
func messageLen(hdr []byte) (int, error) {
	var order binary.ByteOrder
	switch hdr[0] {
	case 'l':
		order = binary.LittleEndian
	case 'B':
		order = binary.BigEndian
	default:
		return 0, malformed("byte order %q", hdr[0])
	}
	if hdr[3] != 1 {
		return 0, malformed("protocol version %d", hdr[3])
	}
	body := uint64(order.Uint32(hdr[4:]))
	fields := uint64(order.Uint32(hdr[12:]))
	n := headerLen + fields
	n = (n+7)/8*8 + body
	if n > maxMessage {
		return 0, malformed("message of %d bytes", n)
	}
	return int(n), nil
}

// Unmarshal decodes one complete message, which must fill b exactly.
func Unmarshal(b []byte) (*Message, error) {
	if len(b) < headerLen {
		return nil, malformed("%d bytes is shorter than a header", len(b))
	}
	n, err := messageLen(b[:headerLen])
	if err != nil {
		return nil, err
	}
	if n != len(b) {
		return nil, malformed("message says %d bytes, have %d", n, len(b))
	}
	d := decoder{buf: b, order: binary.LittleEndian}
	if b[0] == 'B' {
		d.order = binary.BigEndian
	}
	m := &Message{Type: Type(b[1]), Flags: b[2]}
	d.pos = 4
	bodyLen, _ := d.u32()
	m.Serial, _ = d.u32()
	fv, err := d.value("a(yv)", 0)
	if err != nil {
		return nil, fmt.Errorf("header fields: %w", err)
	}
	for _, f := range fv.([]any) {
		st := f.(Struct)
		code, v := st[0].(byte), st[1].(Variant)
		want := map[byte]Signature{
			fieldPath: "o", fieldInterface: "s", fieldMember: "s", fieldErrorName: "s",
			fieldReplySerial: "u", fieldDestination: "s", fieldSender: "s",
			fieldSignature: "g", fieldUnixFDs: "u",
		}[code]
		if want == "" {
			continue // unknown fields must be ignored
		}
		if v.Sig != want {
			return nil, malformed("header field %d has type %q, want %q", code, v.Sig, want)
		}
		switch code {
		case fieldPath:
			m.Path = v.Value.(ObjectPath)
		case fieldInterface:
			m.Interface = v.Value.(string)
		case fieldMember:
			m.Member = v.Value.(string)
		case fieldErrorName:
			m.ErrorName = v.Value.(string)
		case fieldReplySerial:
			m.ReplySerial = v.Value.(uint32)
		case fieldDestination:
			m.Destination = v.Value.(string)
		case fieldSender:
			m.Sender = v.Value.(string)
		case fieldSignature:
			m.Signature = v.Value.(Signature)
		case fieldUnixFDs:
			m.UnixFDs = v.Value.(uint32)
		}
	}
	if err := d.align(8); err != nil {
		return nil, err
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	if int(bodyLen) != len(b)-d.pos {
		return nil, malformed("body length")
	}
	types, err := splitSignature(string(m.Signature))
	if err != nil {
		return nil, err
	}
	// The body aligns from its own start (8-aligned in the message).
	body := decoder{buf: b[d.pos:], order: d.order}
	for _, t := range types {
		v, err := body.value(t, 0)
		if err != nil {
			return nil, fmt.Errorf("body: %w", err)
		}
		m.Body = append(m.Body, v)
	}
	if body.pos != len(body.buf) {
		return nil, malformed("%d bytes after the body's values", len(body.buf)-body.pos)
	}
	return m, nil
}

// ReadMessage reads one message from r.
func ReadMessage(r io.Reader) (*Message, error) {
	hdr := make([]byte, headerLen)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, err
	}
	n, err := messageLen(hdr)
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	copy(b, hdr)
	if _, err := io.ReadFull(r, b[headerLen:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return Unmarshal(b)
}

// Error is an error reply.
type Error struct {
	Name    string // e.g. org.freedesktop.systemd1.NoSuchUnit
	Message string // the first body value when it is a string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Name
	}
	return e.Name + ": " + e.Message
}

// AsError turns an error reply into an *Error.
func (m *Message) AsError() *Error {
	e := &Error{Name: m.ErrorName}
	if len(m.Body) > 0 {
		if s, ok := m.Body[0].(string); ok {
			e.Message = s
		}
	}
	return e
}
