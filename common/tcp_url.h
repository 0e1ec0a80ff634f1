/* tcp_url: the numeric form of a tcp:// URL, the one KeyLoad's own transports serve and
 * dial (common/rpc_tcp.c, common/rpc_direct.c); host names and other schemes are left to
 * nng. Pure: no I/O, no resolver. */
#ifndef KL_TCP_URL_H
#define KL_TCP_URL_H

#include <stdbool.h>
#include <sys/socket.h>

/* Parses tcp://IPV4:PORT or tcp://[IPV6]:PORT into *ss (and its length). With `listen`,
 * a host of "*" or none means every IPv4 address and port 0 is allowed (the kernel picks);
 * without, both are refused, since a client must name a peer. False for anything else:
 * another scheme, a host name, a port outside 0..65535, a host over 63 characters. */
bool kl_tcp_url_parse(const char *url, bool listen, struct sockaddr_storage *ss, socklen_t *len);

#endif
