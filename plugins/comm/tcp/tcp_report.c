/* What `plait doctor` shows of the TCP transport (plait_plugin_desc.report):
 * the interfaces up with an address, the one a job on one host uses and the
 * one ranks on several hosts would listen on, chosen by the same code that
 * chooses it at start (tcp_pick_address). */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "tcp.h"

void tcp_report(const plait_host *h, const plait_config *cfg, plait_report_fn line, void *ctx) {
    tcp_settings s;
    memset(&s, 0, sizeof s);
    if (cfg) snprintf(s.ifname, sizeof s.ifname, "%s", plait_cfg_str(h, cfg, "comm.tcp", "ifname"));
    char text[1024];
    struct ifaddrs *list = NULL;
    size_t off = 0;
    if (getifaddrs(&list) == 0) {
        for (const struct ifaddrs *a = list; a && off + 80 < sizeof text; a = a->ifa_next) {
            if (!a->ifa_addr || !(a->ifa_flags & IFF_UP)) continue;
            int fam = a->ifa_addr->sa_family;
            if (fam != AF_INET && fam != AF_INET6) continue;
            if (fam == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)a->ifa_addr)->sin6_addr))
                continue;
            char ip[INET6_ADDRSTRLEN];
            const void *p = fam == AF_INET ? (const void *)&((const struct sockaddr_in *)a->ifa_addr)->sin_addr
                                           : (const void *)&((const struct sockaddr_in6 *)a->ifa_addr)->sin6_addr;
            inet_ntop(fam, p, ip, sizeof ip);
            off += (size_t)snprintf(text + off, sizeof text - off, "%s%s %s", off ? ", " : "interfaces up: ",
                                    a->ifa_name, ip);
        }
        freeifaddrs(list);
    }
    line(ctx, off ? text : "no network interface is up with an address", NULL);
    tcp_addr_info info;
    struct sockaddr_storage ss;
    socklen_t sl;
    char ip[INET6_ADDRSTRLEN] = "?";
    if (!s.ifname[0]) {
        line(ctx, "a job on one host: loopback (lo)", NULL);
    } else if (tcp_pick_address(h, &s, 1, &info, &ss, &sl) == PLAIT_OK) {
        inet_ntop(info.family, info.addr, ip, sizeof ip);
        snprintf(text, sizeof text, "a job on one host: %s %s ([comm.tcp] ifname = %s)", info.ifname, ip, s.ifname);
        line(ctx, text, NULL);
    }
    if (tcp_pick_address(h, &s, 0, &info, &ss, &sl) == PLAIT_OK) {
        inet_ntop(info.family, info.addr, ip, sizeof ip);
        snprintf(text, sizeof text, "ranks on several hosts: %s %s (%s)", info.ifname, ip,
                 s.ifname[0] ? "[comm.tcp] ifname" : "the first interface up that is not loopback, docker, virbr, "
                                                     "veth or br-; [comm.tcp] ifname chooses another");
        line(ctx, text, NULL);
    } else {
        snprintf(text, sizeof text, "ranks on several hosts could not start: %s", h->last_error());
        line(ctx, text, s.ifname[0] ? "name an interface that is up with an address in [comm.tcp] ifname"
                                    : "bring up an interface the other hosts reach (not loopback or a bridge), "
                                      "or name one with [comm.tcp] ifname");
    }
}
