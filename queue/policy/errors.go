package policy

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// MaxErrors is the most problems an ErrorList reports; a file with more
// gets a last entry that says how many were left out.
const MaxErrors = 20

// Error is one problem in a policy file: where it is, which field, and
// what is wrong.
type Error struct {
	// File is the path given to Load; empty for Parse.
	File string
	// Line and Column locate the problem, both starting at 1. Zero when
	// the problem has no place (an unreadable file). Column may be zero
	// when only the line is known.
	Line, Column int
	// Field is the path of the field, such as "downstreams.shopify.rate"
	// or `tenants["acme:eu"].limit`; empty for problems with the document
	// itself.
	Field string
	// Msg says what is wrong and, where it helps, what was found.
	Msg string
	// Err is the underlying error, if any (such as an error wrapping
	// algorithms.ErrInvalidPolicy, or the *fs.PathError of Load).
	Err error
}

// Error formats e as "file:line:column: field: message"; without a file
// the place reads "line L:C".
func (e *Error) Error() string {
	place := e.File
	switch {
	case e.Line > 0 && e.File != "":
		place = fmt.Sprintf("%s:%d", e.File, e.Line)
	case e.Line > 0:
		place = fmt.Sprintf("line %d", e.Line)
	}
	if e.Line > 0 && e.Column > 0 {
		place += fmt.Sprintf(":%d", e.Column)
	}
	msg := e.Msg
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	if place != "" {
		msg = place + ": " + msg
	}
	return msg
}

// Unwrap returns the underlying error, if any.
func (e *Error) Unwrap() error { return e.Err }

// ErrorList is every problem found in a policy file, in the order of the
// file. Parse and Load return one (never empty) when the file is not valid;
// errors.As finds its first *Error, and errors.Is looks through all of
// them.
type ErrorList []*Error

// Error returns one problem per line.
func (l ErrorList) Error() string {
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

// Unwrap returns the problems, for errors.Is and errors.As.
func (l ErrorList) Unwrap() []error {
	out := make([]error, len(l))
	for i, e := range l {
		out[i] = e
	}
	return out
}

// finish sorts the problems by place, caps them at MaxErrors and names the
// file in each.
func (l ErrorList) finish(file string) ErrorList {
	slices.SortStableFunc(l, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
	if more := len(l) - MaxErrors; more > 0 {
		l = append(l[:MaxErrors:MaxErrors], &Error{Msg: fmt.Sprintf("%d more problems not shown", more)})
	}
	for _, e := range l {
		e.File = file
	}
	return l
}
