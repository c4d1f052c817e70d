package inventory

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Limits on the group_vars/ and host_vars/ files read beside an inventory.
const (
	MaxVarsFiles     = 10000    // files read from both directories
	MaxVarsFilesSize = 64 << 20 // their bytes together
)

var varsExtensions = []string{"", ".yml", ".yaml", ".json"}

// VarsFile is one file ReadVarsDirs read, with the bytes it read, so that
// a plan can record what its hosts came from.
type VarsFile struct {
	Path string // relative to the inventory's directory, e.g. group_vars/ash.yml
	Data []byte
}

// VarsFiles is every file ReadVarsDirs read, vault-encrypted ones
// included, in the order it read them.
func (inv *Inventory) VarsFiles() []VarsFile {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return append([]VarsFile(nil), inv.varsFiles...)
}

// ReadVarsDirs reads the group_vars/ and host_vars/ directories of fsys,
// the directory the inventory file is in, as Ansible's host_group_vars
// plugin does: for a group or host NAME, the first of NAME, NAME.yml,
// NAME.yaml and NAME.json, or every file (without an extension or with
// one of those) under a directory NAME/, in name order, hidden files and
// backups~ left out. Each file is a YAML mapping of variables.
//
// As in Ansible, these variables come above the inventory file's: a
// group_vars file of any group over every group variable set in the
// inventory file, host vars in the file over those, host_vars/ over all.
//
// A vault-encrypted file cannot be read without its password: it is left
// out with a warning, since it usually holds secrets and not the settings
// relayctl reads. Call ReadVarsDirs once, before selecting.
func (inv *Inventory) ReadVarsDirs(fsys fs.FS) error {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	r := &varsReader{inv: inv, fsys: fsys, dir: filepath.Dir(inv.File)}
	for _, g := range inv.groups {
		g.fileVars = r.entity("group_vars", g.name)
	}
	for _, h := range inv.hosts {
		h.fileVars = r.entity("host_vars", h.name)
	}
	if len(r.errs) > 0 {
		sort.SliceStable(r.errs, func(i, j int) bool {
			if r.errs[i].File != r.errs[j].File {
				return r.errs[i].File < r.errs[j].File
			}
			return r.errs[i].Line < r.errs[j].Line
		})
		return Errors(r.errs)
	}
	return nil
}

type varsReader struct {
	inv     *Inventory
	fsys    fs.FS
	dir     string                     // of the inventory file, to name vars files in errors
	entries map[string]map[string]bool // group_vars, host_vars: name → is a directory; nil when absent
	files   int
	size    int
	errs    []*Error
}

func (r *varsReader) fail(file string, line int, format string, a ...any) {
	if len(r.errs) < maxErrors {
		r.errs = append(r.errs, &Error{File: file, Line: line, Msg: fmt.Sprintf(format, a...)})
	}
}

// list is the entries of group_vars or host_vars, read once.
func (r *varsReader) list(sub string) map[string]bool {
	if r.entries == nil {
		r.entries = map[string]map[string]bool{}
	}
	if m, ok := r.entries[sub]; ok {
		return m
	}
	var m map[string]bool
	if des, err := fs.ReadDir(r.fsys, sub); err == nil {
		m = make(map[string]bool, len(des))
		for _, de := range des {
			m[de.Name()] = de.IsDir()
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		r.fail(filepath.Join(r.dir, sub), 0, "cannot read the directory: %v", err)
	}
	r.entries[sub] = m
	return m
}

// entity reads the vars files of one group or host, nil when it has none.
func (r *varsReader) entity(sub, name string) map[string]Value {
	entries := r.list(sub)
	if entries == nil || strings.ContainsAny(name, `/\`) || !fs.ValidPath(path.Join(sub, name)) {
		return nil
	}
	var files []string
	for _, ext := range varsExtensions {
		isDir, ok := entries[name+ext]
		if !ok {
			continue
		}
		if isDir {
			files = r.walk(path.Join(sub, name+ext))
		} else {
			files = []string{path.Join(sub, name+ext)}
		}
		break
	}
	var vars map[string]Value
	for _, f := range files {
		for k, v := range r.file(f) {
			if vars == nil {
				vars = map[string]Value{}
			}
			vars[k] = v
		}
	}
	return vars
}

// walk is Ansible's _get_dir_vars_files: every file below dir in name
// order, descending into directories without an extension.
func (r *varsReader) walk(dir string) []string {
	des, err := fs.ReadDir(r.fsys, dir)
	if err != nil {
		r.fail(filepath.Join(r.dir, dir), 0, "cannot read the directory: %v", err)
		return nil
	}
	var out []string
	for _, de := range des { // fs.ReadDir sorts by name
		name := de.Name()
		if strings.HasPrefix(name, ".") || strings.HasSuffix(name, "~") {
			continue
		}
		ext := path.Ext(name)
		switch full := path.Join(dir, name); {
		case de.IsDir() && ext == "":
			out = append(out, r.walk(full)...)
		case de.Type().IsRegular() || de.Type()&fs.ModeSymlink != 0:
			for _, e := range varsExtensions {
				if ext == e {
					out = append(out, full)
				}
			}
		}
	}
	return out
}

// file reads one vars file: a YAML (or JSON) mapping of variables.
func (r *varsReader) file(rel string) map[string]Value {
	name := filepath.Join(r.dir, rel)
	r.files++
	if r.files > MaxVarsFiles {
		if r.files == MaxVarsFiles+1 {
			r.fail(name, 0, "more than %d files in group_vars/ and host_vars/; relayctl reads at most %d", MaxVarsFiles, MaxVarsFiles)
		}
		return nil
	}
	data, err := fs.ReadFile(r.fsys, rel)
	if err != nil {
		r.fail(name, 0, "cannot read it: %v", err)
		return nil
	}
	r.inv.varsFiles = append(r.inv.varsFiles, VarsFile{Path: rel, Data: data})
	if r.size += len(data); len(data) > MaxSize || r.size > MaxVarsFilesSize {
		r.fail(name, 0, "group_vars/ and host_vars/ hold more than %d bytes (this file %d); relayctl reads at most %d", MaxVarsFilesSize, len(data), MaxVarsFilesSize)
		return nil
	}
	if bytes.HasPrefix(data, []byte("$ANSIBLE_VAULT;")) {
		r.inv.Warnings = append(r.inv.Warnings, &Error{File: name, Msg: "vault-encrypted: relayctl does not read it, so a host setting or label set only here is not seen; keep ansible_host, ansible_port, ansible_user and labels in a file that is not encrypted"})
		return nil
	}
	root, err := decodeOne(data)
	if errors.Is(err, errEmpty) {
		return nil
	}
	if err != nil {
		e := yamlError(name, err)
		r.errs = append(r.errs, e)
		return nil
	}
	b := &builder{file: name}
	p := &yamlParser{b: b}
	root = p.visit(root)
	if isNull(root) {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		r.fail(name, root.Line, "a vars file is a mapping of variables (name: value), not a %s", kindOfNode(root))
		return nil
	}
	vars := map[string]Value{}
	for _, kv := range p.pairs(root, "variable") {
		if key, ok := p.varName(kv.key); ok {
			v := p.value(kv.value)
			v.File = name
			vars[key] = v
		}
	}
	r.errs = append(r.errs, b.errs...)
	return vars
}
