package main

import (
	"testing"

	"github.com/relayctl/relayctl/internal/lazyre"
)

// The package-level expressions of every package relayctl links compile
// when first used (lazyre): this compiles them all, so a bad one fails
// here rather than in the first command that uses it.
func TestEveryLazyExpressionCompiles(t *testing.T) {
	if lazyre.Count() == 0 {
		t.Fatal("no expression registered: is lazyre still used?")
	}
	if err := lazyre.CompileAll(); err != nil {
		t.Fatal(err)
	}
}
