package darwin

import (
	"fmt"
	"strings"
)

// parseSBPL reads the subset of SBPL this package writes: lists, atoms,
// "strings" with \" and \\ escapes, #"regex" literals and ; comments. It
// returns the top-level forms and the byte count of everything that is not
// a comment or spacing, which is what the compiler keeps.
func parseSBPL(text string) ([]*node, int, error) {
	p := &sbplParser{src: text, line: 1}
	var (
		stack []*node
		top   []*node
	)
	for {
		tok, err := p.next()
		if err != nil {
			return nil, 0, err
		}
		switch {
		case tok == nil:
			if len(stack) > 0 {
				return nil, 0, fmt.Errorf("line %d: %d unclosed parenthesis(es)", stack[len(stack)-1].line, len(stack))
			}
			return top, p.kept, nil
		case tok.kind == listNode && tok.text == "(":
			stack = append(stack, &node{kind: listNode, line: tok.line})
			continue
		case tok.kind == listNode:
			if len(stack) == 0 {
				return nil, 0, fmt.Errorf("line %d: unbalanced )", tok.line)
			}
			tok = stack[len(stack)-1]
			stack = stack[:len(stack)-1]
		}
		if len(stack) == 0 {
			if tok.kind != listNode {
				return nil, 0, fmt.Errorf("line %d: bare %s at top level", tok.line, tok)
			}
			top = append(top, tok)
			continue
		}
		parent := stack[len(stack)-1]
		parent.kids = append(parent.kids, tok)
	}
}

type sbplParser struct {
	src  string
	pos  int
	line int
	kept int
}

// next returns the next token: a list node with text "(" or ")" for
// parentheses, or a finished atom, string or regex node. nil means the end.
func (p *sbplParser) next() (*node, error) {
	p.skipSpaceAndComments()
	if p.pos >= len(p.src) {
		return nil, nil
	}
	c := p.src[p.pos]
	switch {
	case c == '(' || c == ')':
		p.pos++
		p.kept++
		return &node{kind: listNode, text: string(c), line: p.line}, nil
	case c == '"':
		return p.readString(stringNode, 1)
	case strings.HasPrefix(p.src[p.pos:], `#"`):
		return p.readString(regexNode, 2)
	}
	return p.readAtom()
}

func (p *sbplParser) skipSpaceAndComments() {
	for p.pos < len(p.src) {
		switch c := p.src[p.pos]; {
		case c == '\n':
			p.line++
			p.pos++
		case c == ' ' || c == '\t' || c == '\r':
			p.pos++
		case c == ';':
			for p.pos < len(p.src) && p.src[p.pos] != '\n' {
				p.pos++
			}
		default:
			return
		}
	}
}

// readString reads a quoted literal after an opening of open bytes. Only
// \" and \\ are escapes in strings (regexes keep their backslashes as
// written); a raw line break, a NUL or more than MaxLiteralBytes is an error.
func (p *sbplParser) readString(kind nodeKind, open int) (*node, error) {
	start, line := p.pos, p.line
	p.pos += open
	var b strings.Builder
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		switch {
		case c == '"':
			p.pos++
			p.kept += p.pos - start
			if b.Len() > MaxLiteralBytes {
				return nil, fmt.Errorf("line %d: literal of %d bytes is over the %d-byte limit", line, b.Len(), MaxLiteralBytes)
			}
			return &node{kind: kind, text: b.String(), line: line}, nil
		case c == '\n' || c == '\r' || c == 0:
			return nil, fmt.Errorf("line %d: line break or NUL inside a literal", line)
		case c == '\\':
			if err := p.readEscape(kind, &b, line); err != nil {
				return nil, err
			}
			continue
		default:
			b.WriteByte(c)
		}
		p.pos++
	}
	return nil, fmt.Errorf("line %d: unterminated literal", line)
}

func (p *sbplParser) readEscape(kind nodeKind, b *strings.Builder, line int) error {
	if p.pos+1 >= len(p.src) {
		return fmt.Errorf("line %d: unterminated literal", line)
	}
	e := p.src[p.pos+1]
	switch {
	case kind == regexNode && e != '\n' && e != 0:
		b.WriteString(p.src[p.pos : p.pos+2])
	case e == '"' || e == '\\':
		b.WriteByte(e)
	default:
		return fmt.Errorf("line %d: unknown escape \\%c in a string", line, e)
	}
	p.pos += 2
	return nil
}

func (p *sbplParser) readAtom() (*node, error) {
	start := p.pos
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		if c == '(' || c == ')' || c == '"' || c == ';' || c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			break
		}
		if c == 0 {
			return nil, fmt.Errorf("line %d: NUL in the profile", p.line)
		}
		p.pos++
	}
	p.kept += p.pos - start
	return &node{kind: atomNode, text: p.src[start:p.pos], line: p.line}, nil
}
