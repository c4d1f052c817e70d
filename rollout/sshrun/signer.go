package sshrun

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// Signer finds the key a person signs with, as ssh-keygen -Y sign does:
// the identity file when one is given (through ssh-agent, by its .pub, when
// the file has a passphrase), else the one key ssh-agent holds. close ends
// the agent connection.
func Signer(identity string) (s ssh.Signer, close func(), err error) {
	close = func() {}
	if identity != "" {
		p, err := expandHome(identity)
		if err != nil {
			return nil, close, err
		}
		s, err := loadIdentity(p)
		if err == nil {
			return s, close, nil
		}
		if !errors.Is(err, errPassphrase) {
			return nil, close, err
		}
		pub, perr := os.ReadFile(p + ".pub")
		if perr != nil {
			return nil, close, fmt.Errorf("%w (and no %s.pub to find it in ssh-agent)", err, tildePath(p))
		}
		want, _, _, _, perr := ssh.ParseAuthorizedKey(pub)
		if perr != nil {
			return nil, close, fmt.Errorf("parse %s.pub: %w", tildePath(p), perr)
		}
		signers, close, aerr := agentSigners()
		if aerr != nil {
			return nil, close, fmt.Errorf("%w; %v", err, aerr)
		}
		for _, s := range signers {
			if bytes.Equal(s.PublicKey().Marshal(), want.Marshal()) {
				return s, close, nil
			}
		}
		close()
		return nil, func() {}, fmt.Errorf("%w; ssh-agent does not hold it either", err)
	}
	signers, close, err := agentSigners()
	if err != nil {
		return nil, close, fmt.Errorf("no key to sign with: give one with -i FILE (%v)", err)
	}
	switch len(signers) {
	case 1:
		return signers[0], close, nil
	case 0:
		close()
		return nil, func() {}, errors.New("no key to sign with: ssh-agent holds none; give one with -i FILE")
	}
	var fps []string
	for _, s := range signers {
		fps = append(fps, s.PublicKey().Type()+" "+ssh.FingerprintSHA256(s.PublicKey()))
	}
	close()
	return nil, func() {}, fmt.Errorf("ssh-agent holds %d keys (%s): say which with -i FILE (its .pub is enough)", len(signers), strings.Join(fps, ", "))
}

func agentSigners() ([]ssh.Signer, func(), error) {
	sock := os.Getenv("SSH_AUTH_SOCK")
	if sock == "" {
		return nil, func() {}, errors.New("SSH_AUTH_SOCK is not set")
	}
	conn, err := net.Dial("unix", sock)
	if err != nil {
		return nil, func() {}, fmt.Errorf("connect to ssh-agent: %w", err)
	}
	signers, err := agent.NewClient(conn).Signers()
	if err != nil {
		conn.Close()
		return nil, func() {}, fmt.Errorf("ssh-agent: %w", err)
	}
	return signers, func() { conn.Close() }, nil
}
