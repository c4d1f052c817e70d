// Package walkthrough holds the test that runs the README's "A ten-minute walkthrough"
// as a newcomer would: make lab, then every command of its shell blocks in
// order, each checked for the exit status the README gives it.
package walkthrough
