package agent

// The release primitives: bytes kept in the release store by their
// sha256 (keep, fetch), a release folder made from the store and checked
// before it is renamed into place (place-release), checked again before a
// window runs it (check-release), described for a receipt (release-sum),
// and old ones removed (prune).
var releasePrimitives = map[string]handler{
	"keep":          pKeep,
	"fetch":         pFetch,
	"place-release": notYet,
	"check-release": notYet,
	"release-sum":   notYet,
	"prune":         notYet,
}
