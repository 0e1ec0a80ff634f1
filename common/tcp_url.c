#include "common/tcp_url.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

bool kl_tcp_url_parse(const char *url, bool listen, struct sockaddr_storage *ss, socklen_t *len)
{
    static const char scheme[] = "tcp://";
    if (url == NULL || strncmp(url, scheme, sizeof scheme - 1) != 0)
        return false;
    const char *hp = url + sizeof scheme - 1;
    const char *colon = strrchr(hp, ':');
    if (colon == NULL || colon[1] == '\0')
        return false;
    char *end = NULL;
    long port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || port < (listen ? 0 : 1) || port > 65535)
        return false;
    char host[64];
    size_t hl = (size_t)(colon - hp);
    if (hl >= sizeof host)
        return false;
    memcpy(host, hp, hl);
    host[hl] = '\0';
    memset(ss, 0, sizeof *ss);
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
        host[hl - 1] = '\0';
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        *len = sizeof *s6;
        return inet_pton(AF_INET6, host + 1, &s6->sin6_addr) == 1;
    }
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    s4->sin_family = AF_INET;
    s4->sin_port = htons((uint16_t)port);
    *len = sizeof *s4;
    if (hl == 0 || strcmp(host, "*") == 0) {
        s4->sin_addr.s_addr = htonl(INADDR_ANY);
        return listen;
    }
    return inet_pton(AF_INET, host, &s4->sin_addr) == 1;
}
