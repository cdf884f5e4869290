package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// terminalWidth returns the columns of f and whether it is a terminal.
func terminalWidth(f *os.File) (int, bool) {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 {
		return 0, false
	}
	return int(ws.Col), true
}

// table prints aligned columns; rows longer than width (when known) are cut
// so the table never wraps in a terminal.
type table struct {
	noHeaders bool
	head      []string
	rows      [][]string
	right     map[int]bool // right-aligned (numeric) columns
}

func newTable(right []int, head ...string) *table {
	t := &table{head: head, right: map[int]bool{}}
	for _, i := range right {
		t.right[i] = true
	}
	return t
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer, width int) {
	widths := make([]int, len(t.head))
	all := append([][]string{t.head}, t.rows...)
	for _, r := range all {
		for i, c := range r {
			if i < len(widths) && utf8.RuneCountInString(c) > widths[i] {
				widths[i] = utf8.RuneCountInString(c)
			}
		}
	}
	if t.noHeaders {
		all = all[1:] // widths still fit the header: columns stay put
	}
	for _, r := range all {
		var b strings.Builder
		for i, c := range r {
			if i >= len(widths) {
				break
			}
			if i > 0 {
				b.WriteString("  ")
			}
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			if t.right[i] {
				b.WriteString(pad + c)
			} else if i < len(r)-1 {
				b.WriteString(c + pad)
			} else {
				b.WriteString(c)
			}
		}
		line := strings.TrimRight(b.String(), " ")
		if width > 0 && utf8.RuneCountInString(line) > width {
			line = string([]rune(line)[:width])
		}
		fmt.Fprintln(w, line)
	}
}

func cores(v float64) string { return fmt.Sprintf("%.2f", v) }

func pct(part, whole float64) string {
	if whole <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*part/whole)
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
