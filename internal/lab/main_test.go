package lab

import (
	"os"
	"testing"
)

// TestMain removes the relayd builds the tests made (lab.BuildRelayd).
func TestMain(m *testing.M) { os.Exit(RunRemovingBuilds(m)) }
