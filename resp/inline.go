package resp

// Inline commands: one line of space-separated arguments, as typed into
// telnet, split as Redis's sdssplitargs splits them. An argument may be
// "double quoted" (with \n \r \t \b \a \\ \" and \xHH escapes) or 'single
// quoted' (with \' as the only escape); a closing quote must be followed by
// a space or the end of the line.

// readInline reads one inline request line and splits it into arguments.
func (r *reader) readInline() error {
	line, err := r.readLine(r.lim.inline)
	if err != nil {
		return err
	}
	line = trimEOL(line)
	for i := 0; ; {
		for i < len(line) && isSpace(line[i]) {
			i++
		}
		if i == len(line) {
			return nil
		}
		if i, err = r.inlineArg(line, i); err != nil {
			return err
		}
		if len(r.ends) > r.lim.array {
			return errArrayLen
		}
	}
}

// inlineArg appends the argument starting at line[i] and returns the index
// after it.
func (r *reader) inlineArg(line []byte, i int) (int, error) {
	var err error
	for i < len(line) && !isSpace(line[i]) {
		switch line[i] {
		case '"':
			i, err = r.quoted(line, i+1, unescapeDouble)
		case '\'':
			i, err = r.quoted(line, i+1, unescapeSingle)
		default:
			r.arena = append(r.arena, line[i])
			i++
			continue
		}
		if err != nil {
			return i, err
		}
		if i < len(line) && !isSpace(line[i]) {
			return i, errQuotes
		}
	}
	r.ends = append(r.ends, len(r.arena))
	return i, nil
}

// unescaper decodes the escape starting at line[i] (a backslash) inside a
// quoted argument: the decoded byte, the bytes consumed, and whether line[i]
// starts an escape at all.
type unescaper func(line []byte, i int) (byte, int, bool)

// quoted appends a quoted argument whose first byte (after the opening
// quote) is line[i], and returns the index after the closing quote.
func (r *reader) quoted(line []byte, i int, unescape unescaper) (int, error) {
	quote := line[i-1]
	for i < len(line) {
		if line[i] == quote {
			return i + 1, nil
		}
		if b, n, ok := unescape(line, i); ok {
			r.arena = append(r.arena, b)
			i += n
			continue
		}
		r.arena = append(r.arena, line[i])
		i++
	}
	return i, errQuotes
}

func unescapeDouble(line []byte, i int) (byte, int, bool) {
	if line[i] != '\\' || i+1 >= len(line) {
		return 0, 0, false
	}
	if line[i+1] == 'x' && i+3 < len(line) && isHex(line[i+2]) && isHex(line[i+3]) {
		return hexVal(line[i+2])<<4 | hexVal(line[i+3]), 4, true
	}
	switch c := line[i+1]; c {
	case 'n':
		return '\n', 2, true
	case 'r':
		return '\r', 2, true
	case 't':
		return '\t', 2, true
	case 'b':
		return '\b', 2, true
	case 'a':
		return '\a', 2, true
	default:
		return c, 2, true
	}
}

func unescapeSingle(line []byte, i int) (byte, int, bool) {
	if line[i] == '\\' && i+1 < len(line) && line[i+1] == '\'' {
		return '\'', 2, true
	}
	return 0, 0, false
}

func isSpace(c byte) bool {
	switch c {
	case ' ', '\t', '\r', '\n', '\v', '\f':
		return true
	}
	return false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func hexVal(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}
