#!/usr/bin/env python3
"""Writes the hwloc XML topologies of this folder (python3 make_topologies.py).

Each node is described below from its vendor's published block diagram:
sockets, NUMA nodes, cores and hardware threads in Linux's numbering (every
core's first thread, then their SMT siblings), and the PCIe tree of its GPUs
and network cards. hwloc reads the files as it reads `lstopo node.xml`'s
output; plait's tests and `PLAIT_TOPOLOGY=<file> plait doctor --topology`
use them in place of the machine's own. Network cards carry two info
attributes hwloc does not record, LinkSpeedMbps and MTU (on a live machine
plait reads /sys/class/net), and GPUs joined by NVLink carry NVLinkIsland.
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))


class Gen:
    def __init__(self):
        self.gp = 1

    def next(self):
        self.gp += 1
        return self.gp


def mask(cpus):
    v = 0
    for c in cpus:
        v |= 1 << c
    h = "%x" % v
    h = h.rjust((len(h) + 7) // 8 * 8, "0")
    return "0x" + ",0x".join(h[i:i + 8] for i in range(0, len(h), 8))


def sets(cpus, nodes):
    return ('cpuset="%s" complete_cpuset="%s" nodeset="%s" complete_nodeset="%s"'
            % (mask(cpus), mask(cpus), mask(nodes), mask(nodes)))


def pci_dev(g, bus, cls, vendor, device, infos, osdevs, ind):
    out = [ind + '<object type="PCIDev" gp_index="%d" pci_busid="0000:%02x:00.0" '
           'pci_type="%04x [%04x:%04x] [%04x:0000] 00" pci_link_speed="63.015385">'
           % (g.next(), bus, cls, vendor, device, vendor)]
    for k, v in infos:
        out.append(ind + '  <info name="%s" value="%s"/>' % (k, v))
    for name, t in osdevs:
        out.append(ind + '  <object type="OSDev" gp_index="%d" name="%s" osdev_type="%d"/>' % (g.next(), name, t))
    out.append(ind + "</object>")
    return out


def host_bridge(g, first, last, children, ind):
    """children: lists of lines, each under its own switch (bus) or directly on the root."""
    out = [ind + '<object type="Bridge" gp_index="%d" bridge_type="0-1" depth="0" bridge_pci="0000:[%02x-%02x]">'
           % (g.next(), first, last)]
    out += children
    out.append(ind + "</object>")
    return out


def switch(g, bus, first, last, children, ind):
    out = [ind + '<object type="Bridge" gp_index="%d" bridge_type="1-1" depth="1" bridge_pci="0000:[%02x-%02x]" '
           'pci_busid="0000:%02x:00.0" pci_type="0604 [1000:c030] [1000:a064] 00" pci_link_speed="63.015385">'
           % (g.next(), first, last, bus)]
    out += children
    out.append(ind + "</object>")
    return out


def node(name, comment, packages, cores_per_pkg, smt, io):
    """io[p]: lines of package p's PCIe tree (indent 6)."""
    g = Gen()
    npu = packages * cores_per_pkg
    allcpus = list(range(npu * smt))
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', '<!DOCTYPE topology SYSTEM "hwloc2.dtd">',
             "<!--", comment.strip(), "Written by configs/topologies/make_topologies.py. -->",
             '<topology version="2.0">',
             '  <object type="Machine" os_index="0" %s allowed_cpuset="%s" allowed_nodeset="%s" gp_index="1">'
             % (sets(allcpus, range(packages)), mask(allcpus), mask(range(packages)))]
    for p in range(packages):
        first = [p * cores_per_pkg + c for c in range(cores_per_pkg)]
        cpus = sorted(c + s * npu for c in first for s in range(smt))
        lines.append('    <object type="Package" os_index="%d" %s gp_index="%d">' % (p, sets(cpus, [p]), g.next()))
        lines.append('      <object type="NUMANode" os_index="%d" %s gp_index="%d" local_memory="%d"/>'
                     % (p, sets(cpus, [p]), g.next(), 1024 ** 4))
        for c in first:
            pus = [c + s * npu for s in range(smt)]
            lines.append('      <object type="Core" os_index="%d" %s gp_index="%d">' % (c, sets(pus, [p]), g.next()))
            for u in pus:
                lines.append('        <object type="PU" os_index="%d" %s gp_index="%d"/>'
                             % (u, sets([u], [p]), g.next()))
            lines.append("      </object>")
        lines += io(g, p)
        lines.append("    </object>")
    lines += ["  </object>", "</topology>", ""]
    with open(os.path.join(HERE, name), "w") as f:
        f.write("\n".join(lines))


NET, OFED = 2, 3


def dgx_io(g, p):
    # NVIDIA DGX H100 user guide, "System topology": GPUs 0-3 and the cluster
    # ports' ConnectX-7 cards 0-3 on CPU 0, 4-7 on CPU 1, each GPU sharing a
    # PCIe Gen5 switch with one ConnectX-7; the in-band management ConnectX-7
    # (2 x 100 GbE, Ethernet MTU left at 1500) on CPU 1.
    gpu_bus = [[0x18, 0x2a, 0x3a, 0x5d], [0x9a, 0xab, 0xba, 0xdb]][p]
    out = []
    for i, bus in enumerate(gpu_bus):
        k = p * 4 + i
        nic_bus = bus - 1
        kids = pci_dev(g, bus, 0x0302, 0x10de, 0x2330, [("NVLinkIsland", "0")], [], " " * 10)
        kids += pci_dev(g, nic_bus, 0x0207, 0x15b3, 0x1021, [("LinkSpeedMbps", "400000"), ("MTU", "4096")],
                        [("ibp%ds0" % nic_bus, NET), ("mlx5_%d" % k, OFED)], " " * 10)
        out += host_bridge(g, bus - 3, bus + 2, switch(g, bus - 2, bus - 1, bus + 1, kids, " " * 8), " " * 6)
    if p == 1:
        kids = pci_dev(g, 0xc0, 0x0200, 0x15b3, 0x1021, [("LinkSpeedMbps", "100000"), ("MTU", "1500")],
                       [("enp192s0f0", NET), ("mlx5_8", OFED)], " " * 8)
        out += host_bridge(g, 0xc0, 0xc0, kids, " " * 6)
    return out


def workstation_io(g, p):
    # A single-socket workstation (AMD Threadripper PRO 5975WX, WRX80 board's
    # block diagram): four RTX A6000 on CPU root ports, no NVLink bridge,
    # and the board's 10 GbE port.
    out = []
    for i, bus in enumerate([0x01, 0x21, 0x41, 0x61]):
        out += host_bridge(g, bus, bus, pci_dev(g, bus, 0x0300, 0x10de, 0x2230, [], [], " " * 8), " " * 6)
    out += host_bridge(g, 0x81, 0x81, pci_dev(g, 0x81, 0x0200, 0x8086, 0x1563,
                                              [("LinkSpeedMbps", "10000"), ("MTU", "9000")],
                                              [("enp129s0", NET)], " " * 8), " " * 6)
    return out


def cpu_io(g, p):
    # A two-socket CPU node (2 x Intel Xeon Platinum 8358, 32 cores each,
    # one NUMA node per socket): one 25 GbE card on CPU 0.
    if p != 0:
        return []
    return host_bridge(g, 0x31, 0x31, pci_dev(g, 0x31, 0x0200, 0x8086, 0x159b,
                                              [("LinkSpeedMbps", "25000"), ("MTU", "9000")],
                                              [("ens1f0", NET)], " " * 8), " " * 6)


node("dgx-h100.xml", "NVIDIA DGX H100: 2 x Xeon Platinum 8480C (56 cores, 2 threads each, one NUMA node per\n"
     "socket), 8 H100 SXM joined by NVSwitch, 8 ConnectX-7 400 Gb/s, one 100 GbE management card.",
     2, 56, 2, dgx_io)
node("workstation-4gpu.xml", "A PCIe-only workstation: 1 x Threadripper PRO 5975WX (32 cores, 2 threads each), "
     "4 RTX A6000\non CPU root ports without NVLink, one 10 GbE port.", 1, 32, 2, workstation_io)
node("cpu-2socket.xml", "A two-socket CPU node: 2 x Xeon Platinum 8358 (32 cores, 2 threads each, one NUMA node\n"
     "per socket), one 25 GbE card on socket 0.", 2, 32, 2, cpu_io)
