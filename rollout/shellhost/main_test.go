package shellhost

import (
	"os"
	"testing"

	"github.com/relayctl/relayctl/internal/lab"
)

// TestMain removes the relayd builds the tests made (lab.BuildRelayd).
func TestMain(m *testing.M) { os.Exit(lab.RunRemovingBuilds(m)) }
