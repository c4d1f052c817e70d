package lab

import (
	"os"
	"testing"
)

// TestMain removes the relayd builds the tests made (BuildRelayd).
func TestMain(m *testing.M) {
	code := m.Run()
	RemoveBuilds()
	os.Exit(code)
}
