// Package dist holds the files that ship relayd as operators install it:
// under systemd (docs/systemd.md), and with relay-service for a service
// manager that runs commands (docs/relay-service.md). They are embedded so
// that the lab installs exactly these bytes.
package dist

import _ "embed"

// Unit is relayd.service, installed as /etc/systemd/system/relayd.service.
//
//go:embed relayd.service
var Unit []byte

// NetnsUnit is relay-netns.service, which makes /run/netns/relay.
//
//go:embed relay-netns.service
var NetnsUnit []byte

// NetnsDropIn is relayd.service.d/netns.conf: relayd in /run/netns/relay.
//
//go:embed drop-ins/netns.conf
var NetnsDropIn []byte

// ForceDropIn is relayd.service.d/so-rcvbuf-force.conf: CAP_NET_ADMIN for
// SO_RCVBUFFORCE.
//
//go:embed drop-ins/so-rcvbuf-force.conf
var ForceDropIn []byte

// ServiceScript is relay-service.sh, installed as
// /opt/relay/bin/relay-service: start, stop, handoff and run relayd for a
// service manager that runs commands.
//
//go:embed relay-service.sh
var ServiceScript []byte

// PreserveDropIn is relayd.service.d/fdstore-preserve.conf, for systemd
// 254 and later: the fd store kept across stop and start too.
//
//go:embed drop-ins/fdstore-preserve.conf
var PreserveDropIn []byte

// Names under /etc/systemd/system.
const (
	UnitName           = "relayd.service"
	NetnsUnitName      = "relay-netns.service"
	NetnsDropInPath    = "relayd.service.d/netns.conf"
	ForceDropInPath    = "relayd.service.d/so-rcvbuf-force.conf"
	PreserveDropInPath = "relayd.service.d/fdstore-preserve.conf"
)
