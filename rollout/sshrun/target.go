package sshrun

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kevinburke/ssh_config"
)

// Target is where a host spec leads once ~/.ssh/config has been applied.
type Target struct {
	Alias         string   // the host as written in the spec (an alias or a name)
	HostName      string   // what is dialled: ssh_config HostName, else Alias
	User          string   // spec user, else ssh_config User, else the local user
	Port          int      // spec port, else ssh_config Port, else 22
	IdentityFiles []string // ssh_config IdentityFile, expanded (~, %d, %h, %r, %u)
	ProxyJump     []string // hops in order, each "[user@]host[:port]" or an alias
}

// Addr is HostName:Port, the address dialled and looked up in known_hosts.
func (t Target) Addr() string { return net.JoinHostPort(t.HostName, strconv.Itoa(t.Port)) }

// String names the target for messages: "relay-ash-1 (127.0.0.2:22)", or
// just the address when there is no alias.
func (t Target) String() string {
	if t.Alias == "" || t.Alias == t.HostName {
		return t.Addr()
	}
	return t.Alias + " (" + t.Addr() + ")"
}

// Resolve turns a spec, an ssh_config alias or "[user@]host[:port]" (IPv6 as
// "[addr]:port" or a bare address), into a Target through the ssh_config
// file named by o.SSHConfig.
func Resolve(spec string, o Options) (Target, error) {
	cfg, err := loadSSHConfig(o.SSHConfig)
	if err != nil {
		return Target{}, err
	}
	return resolve(spec, cfg)
}

// loadSSHConfig reads path, or ~/.ssh/config when path is "". A missing
// default file means no config; a missing explicit one is an error, since
// the user meant a file that is not there.
func loadSSHConfig(path string) (*ssh_config.Config, error) {
	path, explicit, err := sshConfigPath(path)
	if err != nil {
		return nil, err
	}
	if path == "" {
		return nil, nil
	}
	return sshConfigs.get([]string{path}, func() (*ssh_config.Config, error) {
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) && !explicit {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read ssh config: %w", err)
		}
		cfg, err := ssh_config.Decode(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("parse ssh config %s: %w", path, err)
		}
		return cfg, nil
	})
}

// sshConfigPath is the ssh_config file read for path: path itself
// (explicit), or ~/.ssh/config for "" ("" when there is no home).
func sshConfigPath(path string) (file string, explicit bool, err error) {
	if path != "" {
		file, err = expandHome(path)
		return file, true, err
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", false, nil
	}
	return filepath.Join(home, ".ssh", "config"), false, nil
}

// sshConfigs are the ssh_config files parsed, for every dial to share
// (ssh_config.Config is only read once parsed).
var sshConfigs parsed[*ssh_config.Config]

// splitSpec parses "[user@]host[:port]", "[user@][v6addr]:port" and a bare
// IPv6 address. port is 0 when the spec has none.
func splitSpec(spec string) (userName, host string, port int, err error) {
	rest := spec
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		userName, rest = rest[:i], rest[i+1:]
		if userName == "" {
			return "", "", 0, fmt.Errorf("parse host %q: empty user", spec)
		}
	}
	portStr := ""
	switch {
	case strings.HasPrefix(rest, "["):
		end := strings.Index(rest, "]")
		if end < 0 {
			return "", "", 0, fmt.Errorf("parse host %q: missing ]", spec)
		}
		host, rest = rest[1:end], rest[end+1:]
		if rest != "" {
			if !strings.HasPrefix(rest, ":") {
				return "", "", 0, fmt.Errorf("parse host %q: want [address]:port", spec)
			}
			portStr = rest[1:]
			if portStr == "" {
				return "", "", 0, fmt.Errorf("parse host %q: empty port", spec)
			}
		}
	case strings.Count(rest, ":") == 1:
		host, portStr, _ = strings.Cut(rest, ":")
		if portStr == "" {
			return "", "", 0, fmt.Errorf("parse host %q: empty port", spec)
		}
	default:
		// No colon, or a bare IPv6 address (which cannot carry a port).
		host = rest
	}
	if host == "" {
		return "", "", 0, fmt.Errorf("parse host %q: empty host", spec)
	}
	if strings.ContainsAny(spec, " \t\r\n/\\'\"`$;&|") || strings.HasPrefix(host, "-") || strings.HasPrefix(userName, "-") {
		return "", "", 0, fmt.Errorf("parse host %q: invalid character", spec)
	}
	if portStr != "" {
		if port, err = parsePort(portStr); err != nil {
			return "", "", 0, fmt.Errorf("parse host %q: %w", spec, err)
		}
	}
	return userName, host, port, nil
}

func parsePort(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 {
		return 0, fmt.Errorf("invalid port %q", s)
	}
	return p, nil
}

// configGet reads key for alias; a nil config has no values.
func configGet(cfg *ssh_config.Config, alias, key string) (string, error) {
	if cfg == nil {
		return "", nil
	}
	v, err := cfg.Get(alias, key)
	if err != nil {
		return "", fmt.Errorf("read ssh config %s for %s: %w", key, alias, err)
	}
	return v, nil
}

func resolve(spec string, cfg *ssh_config.Config) (Target, error) {
	userName, host, port, err := splitSpec(spec)
	if err != nil {
		return Target{}, err
	}
	t := Target{Alias: host, HostName: host, User: userName, Port: port}
	get := func(key string) string {
		if err != nil {
			return ""
		}
		var v string
		v, err = configGet(cfg, host, key)
		return v
	}
	hostName, cfgUser, cfgPort, jump, proxyCmd := get("HostName"), get("User"), get("Port"), get("ProxyJump"), get("ProxyCommand")
	if err != nil {
		return Target{}, err
	}
	if proxyCmd != "" && !strings.EqualFold(proxyCmd, "none") {
		return Target{}, fmt.Errorf("%s: ssh config ProxyCommand is not supported, use ProxyJump", host)
	}
	if hostName != "" {
		t.HostName = percentExpand(hostName, map[byte]string{'h': host})
	}
	if t.User == "" {
		t.User = cfgUser
	}
	if t.User == "" {
		if t.User, err = localUser(); err != nil {
			return Target{}, err
		}
	}
	if t.Port == 0 && cfgPort != "" {
		if t.Port, err = parsePort(cfgPort); err != nil {
			return Target{}, fmt.Errorf("%s: ssh config Port: %w", host, err)
		}
	}
	if t.Port == 0 {
		t.Port = 22
	}
	if jump != "" && !strings.EqualFold(jump, "none") {
		for _, hop := range strings.Split(jump, ",") {
			hop = strings.TrimSpace(hop)
			if strings.Contains(hop, "://") {
				return Target{}, fmt.Errorf("%s: ssh config ProxyJump %q: URI form is not supported", host, hop)
			}
			if _, _, _, err := splitSpec(hop); err != nil {
				return Target{}, fmt.Errorf("%s: ssh config ProxyJump: %w", host, err)
			}
			t.ProxyJump = append(t.ProxyJump, hop)
		}
	}
	if cfg != nil {
		files, err := cfg.GetAll(host, "IdentityFile")
		if err != nil {
			return Target{}, fmt.Errorf("read ssh config IdentityFile for %s: %w", host, err)
		}
		local, _ := localUser()
		home, _ := os.UserHomeDir()
		for _, f := range files {
			if strings.EqualFold(f, "none") {
				continue
			}
			f = percentExpand(f, map[byte]string{'h': t.HostName, 'r': t.User, 'u': local, 'd': home})
			if f, err = expandHome(f); err != nil {
				return Target{}, err
			}
			t.IdentityFiles = append(t.IdentityFiles, f)
		}
	}
	return t, nil
}

// percentExpand replaces the ssh_config tokens it is given (%h, %r...) and
// %%; unknown tokens stay as written.
func percentExpand(s string, tokens map[byte]string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		c := s[i+1]
		if v, ok := tokens[c]; ok {
			b.WriteString(v)
			i++
		} else if c == '%' {
			b.WriteByte('%')
			i++
		} else {
			b.WriteByte('%')
		}
	}
	return b.String()
}

func localUser() (string, error) {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username, nil
	}
	if u := os.Getenv("USER"); u != "" {
		return u, nil
	}
	return "", errors.New("find local user name: set User in ssh config or user@ in the host")
}

// expandHome turns a leading ~/ into the home directory.
func expandHome(p string) (string, error) {
	if p != "~" && !strings.HasPrefix(p, "~/") {
		return p, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("expand %s: %w", p, err)
	}
	return filepath.Join(home, strings.TrimPrefix(p, "~")), nil
}

// tildePath shortens a path under the home directory for messages.
func tildePath(p string) string {
	home, err := os.UserHomeDir()
	if err != nil || home == "" || home == "/" {
		return p
	}
	if rest, ok := strings.CutPrefix(p, home+"/"); ok {
		return "~/" + rest
	}
	return p
}
