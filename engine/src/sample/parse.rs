//! Parsers of the /proc files the sampler reads. They work on the raw bytes
//! (no UTF-8 check, no allocation) and return None on a malformed input.

/// The programs whose processes are sampled: argv[0]'s basename, fathom's
/// daemon kind (fathom.model.DAEMON_KINDS), and the Ceph entity type an
/// `-i`/`--id` names (None: the program takes no Ceph id).
pub struct Program {
    pub name: &'static str,
    pub kind: &'static str,
    pub entity: Option<&'static str>,
}

pub const PROGRAMS: &[Program] = &[
    Program { name: "ceph-osd", kind: "osd", entity: Some("osd") },
    Program { name: "crimson-osd", kind: "osd", entity: Some("osd") },
    Program { name: "ceph-mon", kind: "mon", entity: Some("mon") },
    Program { name: "ceph-mgr", kind: "mgr", entity: Some("mgr") },
    Program { name: "ceph-mds", kind: "mds", entity: Some("mds") },
    Program { name: "radosgw", kind: "rgw", entity: Some("client") },
    Program { name: "ganesha.nfsd", kind: "ganesha", entity: None },
    Program { name: "ceph-fuse", kind: "fuse", entity: Some("client") },
    Program { name: "rbd-fuse", kind: "rbd_fuse", entity: Some("client") },
];

/// Fields of a /proc/PID/stat (or task/TID/stat) line.
#[derive(Debug, PartialEq)]
pub struct Stat<'a> {
    pub comm: &'a [u8],
    pub state: u8,
    /// clock ticks
    pub utime: u64,
    pub stime: u64,
    pub num_threads: u64,
    /// clock ticks after boot
    pub start: u64,
    /// resident set, pages
    pub rss_pages: u64,
    /// the CPU it last ran on
    pub processor: u64,
}

/// The unsigned integer at the start of `s` (after blanks), if any.
pub fn num(s: &[u8]) -> Option<u64> {
    let s = s.trim_ascii_start();
    let digits = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    s[..digits].iter().try_fold(0u64, |n, b| n.checked_mul(10)?.checked_add((b - b'0') as u64))
}

fn words(s: &[u8]) -> impl Iterator<Item = &[u8]> {
    s.split(|b| b.is_ascii_whitespace()).filter(|w| !w.is_empty())
}

/// A stat line. comm may hold spaces and parentheses: it ends at the last ')'.
pub fn stat(line: &[u8]) -> Option<Stat<'_>> {
    let open = line.iter().position(|&b| b == b'(')?;
    let close = line.iter().rposition(|&b| b == b')')?;
    if close < open {
        return None;
    }
    // Field 3 (state) is the first after comm; field N is at index N - 3.
    let mut f = words(&line[close + 1..]);
    let state = *f.next()?.first()?;
    let mut nth = |skip: usize| f.nth(skip).and_then(num);
    let utime = nth(10)?; // 14
    let stime = nth(0)?; // 15
    let num_threads = nth(4)?; // 20
    let start = nth(1)?; // 22
    let rss_pages = nth(1)?; // 24
    let processor = nth(14).unwrap_or(0); // 39 (kernels since 2.2)
    Some(Stat { comm: &line[open + 1..close], state, utime, stime, num_threads, start, rss_pages, processor })
}

/// The number after `key:` on a line of a /proc/PID/status-like file ("MemTotal:   1234 kB").
pub fn field(buf: &[u8], key: &[u8]) -> Option<u64> {
    buf.split(|&b| b == b'\n').find_map(|line| keyed(line, key))
}

fn keyed(line: &[u8], key: &[u8]) -> Option<u64> {
    match line.strip_prefix(key) {
        Some([b':', rest @ ..]) => num(rest),
        _ => None,
    }
}

/// (voluntary, nonvoluntary) context switches of a task's status file. They
/// are among its last lines, so it is searched from the end.
pub fn status_ctx(buf: &[u8]) -> Option<(u64, u64)> {
    let (mut vol, mut invol) = (None, None);
    for line in buf.rsplit(|&b| b == b'\n') {
        match line.first() {
            Some(b'v') => vol = vol.or_else(|| keyed(line, b"voluntary_ctxt_switches")),
            Some(b'n') => invol = invol.or_else(|| keyed(line, b"nonvoluntary_ctxt_switches")),
            _ => continue,
        }
        if let (Some(v), Some(n)) = (vol, invol) {
            return Some((v, n));
        }
    }
    None
}

/// (time on CPU in ns, times scheduled in) of /proc/PID/task/TID/schedstat.
/// While neither changes the thread has not run, so its other counters have
/// not changed either: the sampler then skips its costlier files.
pub fn schedstat(buf: &[u8]) -> Option<(u64, u64)> {
    let mut f = words(buf);
    let run_ns = num(f.next()?)?;
    let _wait_ns = f.next()?;
    Some((run_ns, num(f.next()?)?))
}

/// The host's CPU in clock ticks from /proc/stat: user, nice, system, idle,
/// iowait, irq, softirq, steal (guest time is already in user and nice), the
/// number of online CPUs (its `cpuN` lines) and the boot time (epoch s).
pub struct HostCpu {
    pub ticks: [u64; 8],
    pub ncpu: u32,
    pub btime: u64,
}

pub const CPU_FIELDS: [&str; 8] = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"];

pub fn proc_stat(buf: &[u8]) -> Option<HostCpu> {
    let mut out = HostCpu { ticks: [0; 8], ncpu: 0, btime: 0 };
    let mut seen = false;
    for line in buf.split(|&b| b == b'\n') {
        if let Some(rest) = line.strip_prefix(b"cpu ") {
            for (t, w) in out.ticks.iter_mut().zip(words(rest)) {
                *t = num(w)?;
            }
            seen = true;
        } else if line.starts_with(b"cpu") && line.get(3).is_some_and(u8::is_ascii_digit) {
            out.ncpu += 1;
        } else if let Some(rest) = line.strip_prefix(b"btime ") {
            out.btime = num(rest)?;
        }
    }
    seen.then_some(out)
}

/// (MemTotal, MemAvailable) in bytes from /proc/meminfo.
pub fn meminfo(buf: &[u8]) -> Option<(u64, u64)> {
    Some((field(buf, b"MemTotal")? * 1024, field(buf, b"MemAvailable")? * 1024))
}

pub const NET_FIELDS: [&str; 8] =
    ["rx_bytes", "rx_packets", "rx_errs", "rx_drop", "tx_bytes", "tx_packets", "tx_errs", "tx_drop"];

/// One interface of /proc/net/dev: name and NET_FIELDS. The two header lines give None.
pub fn net_dev(line: &[u8]) -> Option<(&[u8], [u64; 8])> {
    // An interface name cannot hold ':' (dev_valid_name), so the first one ends it.
    let colon = line.iter().position(|&b| b == b':')?;
    let name = line[..colon].trim_ascii();
    let mut v = [0u64; 16];
    let mut n = 0;
    for w in words(&line[colon + 1..]).take(16) {
        v[n] = num(w)?;
        n += 1;
    }
    if n < 12 || name.is_empty() {
        return None;
    }
    Some((name, [v[0], v[1], v[2], v[3], v[8], v[9], v[10], v[11]]))
}

/// One device of /proc/diskstats. Sectors there are 512 bytes whatever the
/// device's own sector size.
#[derive(Debug, PartialEq, Default)]
pub struct Disk {
    pub reads: u64,
    pub read_bytes: u64,
    pub read_ms: u64,
    pub writes: u64,
    pub write_bytes: u64,
    pub write_ms: u64,
    pub in_flight: u64,
    pub io_ms: u64,
    pub weighted_ms: u64,
}

pub fn diskstats(line: &[u8]) -> Option<(&[u8], Disk)> {
    let mut f = words(line);
    let (_major, _minor, name) = (f.next()?, f.next()?, f.next()?);
    let mut v = [0u64; 11];
    for x in v.iter_mut() {
        *x = num(f.next()?)?;
    }
    let d = Disk {
        reads: v[0],
        read_bytes: v[2] * 512,
        read_ms: v[3],
        writes: v[4],
        write_bytes: v[6] * 512,
        write_ms: v[7],
        in_flight: v[8],
        io_ms: v[9],
        weighted_ms: v[10],
    };
    Some((name, d))
}

/// The program of a /proc/PID/cmdline (NUL-separated argv) by argv[0]'s
/// basename, a full path included (a daemon in a container, seen from the host).
pub fn program(cmdline: &[u8]) -> Option<&'static Program> {
    let argv0 = cmdline.split(|&b| b == 0).next()?;
    let base = argv0.rsplit(|&b| b == b'/').next()?;
    PROGRAMS.iter().find(|p| p.name.as_bytes() == base)
}

/// The Ceph entity name argv gives (`-i 3`, `--id 3`, `--id=3` → osd.3 for an
/// OSD; `-n client.rgw.x`, `--name[=]...` as is), the last one winning as in
/// Ceph's own parsing, which stops at `--`. None if argv names none.
pub fn daemon_id(p: &Program, cmdline: &[u8]) -> Option<String> {
    let entity = p.entity?;
    let mut args = cmdline.split(|&b| b == 0).skip(1);
    let (mut ty, mut id): (Option<&[u8]>, Option<&[u8]>) = (None, None);
    while let Some(a) = args.next() {
        if a == b"--" {
            break;
        }
        let (opt, inline) = match a.iter().position(|&b| b == b'=') {
            Some(i) if a.starts_with(b"--") => (&a[..i], Some(&a[i + 1..])),
            _ => (a, None),
        };
        let named = matches!(opt, b"-n" | b"--name");
        if !named && !matches!(opt, b"-i" | b"--id") {
            continue;
        }
        let Some(v) = inline.or_else(|| args.next()) else { break };
        if named {
            match v.iter().position(|&b| b == b'.') {
                Some(dot) => (ty, id) = (Some(&v[..dot]), Some(&v[dot + 1..])),
                None => (ty, id) = (None, Some(v)), // a bare id: the program's own type
            }
        } else {
            id = Some(v);
        }
    }
    let id = id.filter(|i| !i.is_empty())?;
    let ty = ty.unwrap_or(entity.as_bytes());
    Some(format!("{}.{}", String::from_utf8_lossy(ty), String::from_utf8_lossy(id)))
}

/// The daemon a cephadm systemd unit runs (`ceph-FSID@nfs.a.0.0.host.xyz.service`
/// in /proc/PID/cgroup): the id of a containerized daemon whose argv names none.
pub fn cephadm_unit(cgroup: &[u8]) -> Option<String> {
    unit(cgroup).map(|(_, name)| String::from_utf8_lossy(name).into_owned())
}

/// The cluster a cephadm systemd unit belongs to: the FSID in `ceph-FSID@NAME.service`
/// (how a gateway or client, which the cluster's metadata does not place, is told to be
/// this cluster's or another's).
pub fn cephadm_fsid(cgroup: &[u8]) -> Option<String> {
    unit(cgroup).map(|(fsid, _)| String::from_utf8_lossy(fsid).into_owned()).filter(|f| !f.is_empty())
}

/// (FSID, NAME) of the first `ceph-FSID@NAME.service` segment of a cgroup file.
fn unit(cgroup: &[u8]) -> Option<(&[u8], &[u8])> {
    for line in cgroup.split(|&b| b == b'\n') {
        for seg in line.split(|&b| b == b'/') {
            if let (true, Some(at)) = (seg.starts_with(b"ceph-"), seg.iter().position(|&b| b == b'@'))
                && let Some(name) = seg[at + 1..].strip_suffix(b".service")
                && !name.is_empty()
            {
                return Some((&seg[b"ceph-".len()..at], name));
            }
        }
    }
    None
}

/// The Ceph configuration file argv names (`-c PATH`, `--conf PATH`, `--conf=PATH`),
/// the last one winning and `--` ending the options, as Ceph parses them; None when
/// it names none (the default, /etc/ceph/$cluster.conf).
pub fn conf_arg(cmdline: &[u8]) -> Option<String> {
    let mut args = cmdline.split(|&b| b == 0).skip(1);
    let mut conf: Option<&[u8]> = None;
    while let Some(a) = args.next() {
        if a == b"--" {
            break;
        }
        if let Some(v) = a.strip_prefix(b"--conf=") {
            conf = Some(v);
        } else if matches!(a, b"-c" | b"--conf") {
            conf = args.next().or(conf);
        }
    }
    conf.filter(|c| !c.is_empty()).map(|c| String::from_utf8_lossy(c).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prog(name: &str) -> &'static Program {
        PROGRAMS.iter().find(|p| p.name == name).unwrap()
    }

    fn id(cmd: &str) -> Option<String> {
        let cmdline = cmd.replace(' ', "\0");
        let p = program(cmdline.as_bytes())?;
        daemon_id(p, cmdline.as_bytes())
    }

    #[test]
    fn stat_lines_with_spaces_and_parentheses_in_comm() {
        let line = b"4242 (ceph-osd) S 1 4242 4242 0 -1 4194560 9000 0 3 0 1250 375 0 0 20 0 63 0 98765 \
                     2000000000 51200 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0\n";
        let s = stat(line).unwrap();
        assert_eq!((s.comm, s.state, s.utime, s.stime), (&b"ceph-osd"[..], b'S', 1250, 375));
        assert_eq!((s.num_threads, s.start, s.rss_pages, s.processor), (63, 98765, 51200, 1));
        let odd = format!("7 (a (b) c) d) R 1 2 3 0 -1 0 0 0 0 0 3 4 0 0 20 0 2 0 55 {}5\n", "0 ".repeat(16));
        let s = stat(odd.as_bytes()).unwrap();
        assert_eq!((s.comm, s.state, s.utime, s.stime), (&b"a (b) c) d"[..], b'R', 3, 4));
        assert_eq!((s.num_threads, s.start, s.processor), (2, 55, 5));
        assert_eq!(stat(b"garbage"), None);
        assert_eq!(stat(b"1 x) S (y"), None, "parentheses the wrong way round");
        assert_eq!(stat(b"1 (x) S 1 2 3"), None, "too few fields");
        assert_eq!(stat(b"1 (x) S 1 2 3 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 9 0 7").unwrap().processor, 0, "old kernels");
    }

    #[test]
    fn numbers() {
        assert_eq!(num(b" \t42 kB"), Some(42));
        assert_eq!(num(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(num(b"18446744073709551616"), None, "overflow");
        assert_eq!((num(b""), num(b"-1"), num(b"kB")), (None, None, None));
    }

    #[test]
    fn status_fields() {
        let buf = b"Name:\tceph-osd\nUmask:\t0022\nState:\tS (sleeping)\nVmPeak:\t 2000 kB\nVmRSS:\t  51200 kB\n\
                    Threads:\t63\nvoluntary_ctxt_switches:\t12345\nnonvoluntary_ctxt_switches:\t678\n\
                    x86_Thread_features:\t\nx86_Thread_features_locked:\t\n";
        assert_eq!(status_ctx(buf), Some((12345, 678)));
        // keys are matched whole: "voluntary" is not "nonvoluntary", nor a longer key
        assert_eq!(status_ctx(b"nonvoluntary_ctxt_switches:\t2\nvoluntary_ctxt_switches:\t1"), Some((1, 2)));
        assert_eq!(
            status_ctx(b"voluntary_ctxt_switches_x:\t9\nvoluntary_ctxt_switches:\t1\nnonvoluntary_ctxt_switches:\t2"),
            Some((1, 2))
        );
        assert_eq!(status_ctx(b"Name:\tx\nvoluntary_ctxt_switches:\t1\n"), None);
        assert_eq!(field(buf, b"VmRSS"), Some(51200));
        assert_eq!(field(b"VmRSSx:\t5\nVmRSS:\t7 kB", b"VmRSS"), Some(7));
        assert_eq!(schedstat(b"123456789 5000 42\n"), Some((123456789, 42)));
        assert_eq!(schedstat(b"1 2\n"), None);
    }

    #[test]
    fn host_cpu_and_memory() {
        let buf = b"cpu  100 2 30 4000 50 6 7 8 9 10\ncpu0 50 1 15 2000 25 3 3 4 0 0\ncpu1 50 1 15 2000 25 3 4 4 0 0\n\
                    intr 12345 0 0\nctxt 999\nbtime 1700000000\nprocesses 42\n";
        let c = proc_stat(buf).unwrap();
        assert_eq!((c.ticks, c.ncpu, c.btime), ([100, 2, 30, 4000, 50, 6, 7, 8], 2, 1700000000));
        let old = proc_stat(b"cpu 1 2 3 4\ncpu0 1 2 3 4\n").unwrap(); // a kernel without iowait..steal
        assert_eq!((old.ticks, old.ncpu), ([1, 2, 3, 4, 0, 0, 0, 0], 1));
        assert!(proc_stat(b"intr 1\n").is_none());
        let mem = b"MemTotal:       16303412 kB\nMemFree:         1234 kB\nMemAvailable:   8000000 kB\n";
        assert_eq!(meminfo(mem), Some((16303412 * 1024, 8000000 * 1024)));
    }

    #[test]
    fn net_dev_lines() {
        let head1 = b"Inter-|   Receive                                                |  Transmit";
        let head2 = b" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop";
        assert!(net_dev(head1).is_none() && net_dev(head2).is_none());
        let lo = b"    lo: 1234567     890    0    0    0     0          0         0  1234567     890    0    0    0     0       0          0";
        assert_eq!(net_dev(lo), Some((&b"lo"[..], [1234567, 890, 0, 0, 1234567, 890, 0, 0])));
        // wide counters run into the colon
        let eth = b"enp1s0f0:98765432101 7654321 1 2 0 0 0 10 123456789 654321 3 4 0 0 0 0";
        assert_eq!(net_dev(eth), Some((&b"enp1s0f0"[..], [98765432101, 7654321, 1, 2, 123456789, 654321, 3, 4])));
    }

    #[test]
    fn diskstats_lines() {
        let line = b" 259       0 nvme0n1 1000 10 20480 300 2000 20 40960 600 3 900 950 0 0 0 0 50 5";
        let (name, d) = diskstats(line).unwrap();
        assert_eq!(name, b"nvme0n1");
        assert_eq!(
            d,
            Disk {
                reads: 1000,
                read_bytes: 20480 * 512,
                read_ms: 300,
                writes: 2000,
                write_bytes: 40960 * 512,
                write_ms: 600,
                in_flight: 3,
                io_ms: 900,
                weighted_ms: 950
            }
        );
        let old = b"   8       1 sda1 5 0 40 1 6 0 48 2 0 3 3"; // a 2.6 kernel: 11 counters
        assert_eq!(diskstats(old).unwrap().1.write_bytes, 48 * 512);
        assert!(diskstats(b"   8       1 sda1 5 0").is_none());
    }

    #[test]
    fn argv_to_daemon_id() {
        assert_eq!(id("ceph-osd -i 3").as_deref(), Some("osd.3"));
        assert_eq!(id("/usr/bin/ceph-osd -f --cluster ceph --id 3 --setuser ceph").as_deref(), Some("osd.3"));
        assert_eq!(id("ceph-osd --foreground --id=12 --fsid=x").as_deref(), Some("osd.12"));
        assert_eq!(id("/usr/bin/ceph-osd -n osd.5 -f --setuser ceph").as_deref(), Some("osd.5"));
        assert_eq!(id("crimson-osd --smp 4 -i 7").as_deref(), Some("osd.7"));
        assert_eq!(id("ceph-mon -i a --public-addr 10.0.0.1").as_deref(), Some("mon.a"));
        assert_eq!(id("ceph-mgr --id=x").as_deref(), Some("mgr.x"));
        assert_eq!(id("ceph-mds -i fs.host.abc").as_deref(), Some("mds.fs.host.abc"));
        assert_eq!(id("radosgw -n client.rgw.x -f").as_deref(), Some("client.rgw.x"));
        assert_eq!(id("radosgw --name=client.rgw.site.host.abc").as_deref(), Some("client.rgw.site.host.abc"));
        assert_eq!(id("radosgw --id rgw.x").as_deref(), Some("client.rgw.x"));
        assert_eq!(id("ceph-osd -i 1 -i 2").as_deref(), Some("osd.2"), "the last one wins");
        assert_eq!(id("ceph-osd -- -i 2"), None, "after --: not an option");
        assert_eq!(id("ceph-osd -i"), None);
        assert_eq!(id("ceph-osd -f"), None);
        assert_eq!(id("ganesha.nfsd -F -L STDERR -N NIV_EVENT"), None);
        assert!(program(b"/usr/bin/ganesha.nfsd\0-F").is_some_and(|p| p.kind == "ganesha"));
        assert!(program(b"ceph-osd-prestart.sh\0").is_none() && program(b"").is_none());
        assert!(program(b"python3\0ceph-osd\0-i\x003").is_none(), "argv[0] only");
        assert_eq!(prog("crimson-osd").kind, "osd");
    }

    #[test]
    fn cephadm_units() {
        let cg =
            b"0::/system.slice/system-ceph\\x2d9f1c.slice/ceph-9f1c@nfs.a.0.0.host1.xyz.service/libpod-payload-ab\n";
        assert_eq!(cephadm_unit(cg).as_deref(), Some("nfs.a.0.0.host1.xyz"));
        assert_eq!(cephadm_unit(b"0::/user.slice/user-0.slice/session-3.scope\n"), None);
        assert_eq!(cephadm_unit(b"0::/system.slice/ceph-x@.service\n"), None);
        assert_eq!(cephadm_fsid(cg).as_deref(), Some("9f1c"));
        assert_eq!(cephadm_fsid(b"0::/user.slice/user-0.slice/session-3.scope\n"), None);
    }

    #[test]
    fn conf_args() {
        let conf = |cmd: &str| conf_arg(cmd.replace(' ', "\0").as_bytes());
        assert_eq!(conf("ceph-fuse -c /etc/ceph/b.conf /mnt").as_deref(), Some("/etc/ceph/b.conf"));
        assert_eq!(conf("ganesha.nfsd --conf=/x.conf -F").as_deref(), Some("/x.conf"));
        assert_eq!(conf("rbd-fuse --conf /a.conf -c /b.conf").as_deref(), Some("/b.conf"), "the last wins");
        assert_eq!(conf("ceph-fuse -- -c /a.conf"), None, "-- ends the options");
        assert_eq!(conf("ceph-fuse /mnt"), None);
        assert_eq!(conf("ceph-fuse -c"), None);
    }
}
