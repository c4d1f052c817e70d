package lab

import (
	"fmt"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// A host's stop scans by mount namespace. Once the host's last process has
// gone, the kernel gives that namespace's number to the next one made: a
// tracker must not then find the newcomer's processes.
func TestTrackerIgnoresARecycledMountNamespace(t *testing.T) {
	Require(t)
	start := func() (*exec.Cmd, string) {
		t.Helper()
		cmd := exec.Command("unshare", "-m", "sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		for range 100 {
			id, err := nsID("mnt", fmt.Sprintf("/proc/%d/ns/mnt", cmd.Process.Pid))
			if self, _ := nsID("mnt", "/proc/self/ns/mnt"); err == nil && id != self {
				return cmd, id
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatal("unshare -m never entered a namespace of its own")
		return nil, ""
	}
	// Its owner gone before the stop: nothing to pin, so nothing is matched
	// by that number.
	for range 20 {
		first, id := start()
		first.Process.Kill()
		first.Wait()
		second, id2 := start()
		tr := trackHost(id, map[string]bool{}, nil, first.Process.Pid)
		ps := tr.scan()
		tr.release()
		if slices.Contains(ps, second.Process.Pid) {
			t.Fatalf("a tracker of %s listed pid %d of the namespace made after it (%s)", id, second.Process.Pid, id2)
		}
		if id2 == id {
			return // the number was recycled, and the newcomer was left alone
		}
		second.Process.Kill()
		second.Wait()
	}
	t.Log("the kernel never recycled the number in 20 tries; checked only that a tracker matches nothing of others")
}

// Pinned while its process lives, a namespace keeps its number after the
// process exits, so the next namespace made cannot take it.
func TestTrackerPinsTheMountNamespace(t *testing.T) {
	Require(t)
	cmd := exec.Command("unshare", "-m", "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var id string
	for range 100 {
		id, _ = nsID("mnt", fmt.Sprintf("/proc/%d/ns/mnt", cmd.Process.Pid))
		if self, _ := nsID("mnt", "/proc/self/ns/mnt"); id != "" && id != self {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	tr := trackHost(id, map[string]bool{}, nil, cmd.Process.Pid)
	defer tr.release()
	if ps := tr.scan(); !slices.Contains(ps, cmd.Process.Pid) {
		t.Fatalf("tracker of %s: got %v, want pid %d", id, ps, cmd.Process.Pid)
	}
	cmd.Process.Kill()
	cmd.Wait()
	next := exec.Command("unshare", "-m", "sleep", "60")
	if err := next.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { next.Process.Kill(); next.Wait() }()
	time.Sleep(50 * time.Millisecond)
	if got, _ := nsID("mnt", fmt.Sprintf("/proc/%d/ns/mnt", next.Process.Pid)); got == id {
		t.Fatalf("the next namespace took %s although the tracker pins it", id)
	}
	if ps := tr.scan(); slices.Contains(ps, next.Process.Pid) {
		t.Fatalf("tracker of %s listed pid %d of another namespace", id, next.Process.Pid)
	}
}
