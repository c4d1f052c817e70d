// Package lazyre is a regular expression compiled when it is first used,
// not when the program starts. relayctl's host agent starts three times in
// an apply on each host, and compiling at start the expressions of specs,
// plans and inventories, which it mostly never uses, was most of what a
// start cost it (perf stat: 5.5 ms of CPU a start before, 2.3 after;
// GODEBUG=inittrace=1 named plans, plans/inventory and relay/capability).
//
// Every expression made by New is listed, so a test can compile them all
// (CompileAll): a typo in one fails the tests rather than the first
// command that uses it.
package lazyre

import (
	"fmt"
	"regexp"
	"sync"
)

// Regexp is an expression compiled on its first use.
type Regexp struct {
	expr string
	once sync.Once
	re   *regexp.Regexp
}

var (
	mu  sync.Mutex
	all []*Regexp
)

// New is expr, to be compiled on first use. Call it only for package
// variables, with a constant expression.
func New(expr string) *Regexp {
	r := &Regexp{expr: expr}
	mu.Lock()
	all = append(all, r)
	mu.Unlock()
	return r
}

// Regexp is the compiled expression; it panics if expr does not compile,
// as regexp.MustCompile would have at the program's start.
func (r *Regexp) Regexp() *regexp.Regexp {
	r.once.Do(func() { r.re = regexp.MustCompile(r.expr) })
	return r.re
}

// String is the expression's source text.
func (r *Regexp) String() string { return r.expr }

func (r *Regexp) MatchString(s string) bool { return r.Regexp().MatchString(s) }

func (r *Regexp) Match(b []byte) bool { return r.Regexp().Match(b) }

func (r *Regexp) FindString(s string) string { return r.Regexp().FindString(s) }

func (r *Regexp) FindStringSubmatch(s string) []string { return r.Regexp().FindStringSubmatch(s) }

func (r *Regexp) FindSubmatchIndex(b []byte) []int { return r.Regexp().FindSubmatchIndex(b) }

func (r *Regexp) ReplaceAllString(src, repl string) string {
	return r.Regexp().ReplaceAllString(src, repl)
}

// CompileAll compiles every expression New has made in this program: the
// first that does not compile is the error.
func CompileAll() error {
	mu.Lock()
	list := append([]*Regexp(nil), all...)
	mu.Unlock()
	for _, r := range list {
		if _, err := regexp.Compile(r.expr); err != nil {
			return fmt.Errorf("lazyre: %w", err)
		}
	}
	return nil
}

// Count is how many expressions New has made in this program.
func Count() int {
	mu.Lock()
	defer mu.Unlock()
	return len(all)
}
