// Package hostfacts reads a host's facts from what the host agent's
// observe answers: its framed sections (ParseFrames), turned into
// plans.Facts (FactsFromFrames) and a sample's drop counters
// (DropsFromFrames). relayctl reads a host's answer with it, and the host
// agent its own reading when it judges a window by itself: one reading of
// a host, by one code, on both sides. Host output is untrusted: anything
// outside the shape it expects is an error, never a fact.
package hostfacts
