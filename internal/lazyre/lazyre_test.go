package lazyre

import (
	"strings"
	"testing"
)

func TestCompiledOnFirstUse(t *testing.T) {
	r := New(`^a+$`)
	if r.re != nil {
		t.Fatal("compiled before its first use")
	}
	if !r.MatchString("aaa") || r.MatchString("ab") {
		t.Error("^a+$ matches wrongly")
	}
	if r.re == nil {
		t.Error("not kept once compiled")
	}
}

func TestCompileAllNamesABadExpression(t *testing.T) {
	New(`^(unclosed$`)
	err := CompileAll()
	if err == nil || !strings.Contains(err.Error(), "missing closing )") {
		t.Errorf("CompileAll = %v, want the bad expression's error", err)
	}
}
