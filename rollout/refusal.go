package rollout

import "errors"

// refusal marks a connection the client refused to make (a changed or
// unknown host key, failed authentication): the host is reachable, and
// nothing was done to it.
type refusal struct{ err error }

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// Refusal wraps a dial error that is a refusal, not unreachability.
func Refusal(err error) error { return &refusal{err} }

// IsRefusal reports whether err was wrapped by Refusal.
func IsRefusal(err error) bool {
	var r *refusal
	return errors.As(err, &r)
}

// HostError is a failure on one host, kept apart from the others so a fleet
// operation reports every host.
type HostError struct {
	Host        string
	Unreachable bool // the connection could not be made (or was lost)
	Err         error
}

func (e *HostError) Error() string { return e.Host + ": " + e.Err.Error() }
func (e *HostError) Unwrap() error { return e.Err }

func clip(s string) string { return clipTo(s, 60) }

func clipTo(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
