package safeurl

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
)

// ErrLocal refuses a request or connection to an address the gateway keeps
// its upstreams away from (see LocalAddr).
var ErrLocal = errors.New("refused: a loopback or link-local address (this host, the Lambda runtime API, instance metadata)")

// awsMetadataV6 is the IPv6 address of the EC2 instance metadata service,
// which is neither loopback nor link-local.
var awsMetadataV6 = netip.MustParseAddr("fd00:ec2::254")

// LocalAddr reports whether a request to ip would stay on the gateway's own
// host or reach its link: loopback (where the Lambda runtime API listens),
// the unspecified address (which reaches this host), link-local (among
// them the instance metadata service, 169.254.169.254), or the metadata
// service's IPv6 address. IPv4 addresses written as IPv6 count as IPv4.
func LocalAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsLoopback() || ip.IsUnspecified() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip == awsMetadataV6
}

// LocalHost reports whether host, as written in a URL, names such an
// address without DNS: an IP literal that is one, or localhost. A name
// that resolves to one is refused when the connection is made (RefuseLocal).
func LocalHost(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && LocalAddr(ip)
}

// RefuseLocal is a net.Dialer Control function that refuses a connection
// to a LocalAddr address. It sees the address actually dialed, after DNS,
// so a name that resolves to such an address (or is made to, later) is
// refused too.
func RefuseLocal(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		host, _, _ := net.SplitHostPort(address)
		if LocalHost(host) {
			return ErrLocal
		}
		return nil
	}
	if LocalAddr(ap.Addr()) {
		return fmt.Errorf("%w: %s", ErrLocal, ap.Addr())
	}
	return nil
}
