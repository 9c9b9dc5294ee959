//! Where the CPU went during a measurement, read from `/proc`: a throughput figure on
//! its own cannot say whether the machine ran out of cores or the server was waiting on
//! itself (a single writer, a lock), and B2's explanation needs to know which.

use std::collections::HashMap;
use std::io;
use std::time::Duration;

/// The kernel reports process times in USER_HZ ticks, which Linux fixes at 100 for
/// `/proc` whatever the kernel's own HZ.
const TICK: Duration = Duration::from_millis(10);

/// One reading: CPU time of each watched process, and the machine's busy and total
/// time over every core.
pub struct Reading {
    server: Duration,
    /// Bytes the server has caused to be written to storage (`write_bytes` of
    /// /proc/<pid>/io).
    server_disk: u64,
    /// Each server thread's (name, CPU time), by thread id.
    threads: HashMap<u32, (String, Duration)>,
    client: Duration,
    machine_busy: u64,
    machine_total: u64,
}

/// What one measurement window cost.
pub struct Spent {
    /// CPU time of the server process, and of this load generator, in the window.
    pub server: Duration,
    pub client: Duration,
    /// Share of all cores' time that was idle (or waiting on the disk) in the window.
    pub idle: f64,
    /// The server thread that used the most CPU in the window, and its share of the
    /// window's wall time: near 100% means that one thread is what the rate waits on.
    pub busiest: (String, f64),
    /// Bytes the server caused to be written to storage in the window.
    pub disk_bytes: u64,
}

/// utime + stime of a process.
fn process_time(pid: &str) -> io::Result<Duration> {
    Ok(stat_time(&format!("/proc/{pid}/stat"))?.1)
}

/// (name, utime + stime) from a `stat` file of a process or a thread.
fn stat_time(path: &str) -> io::Result<(String, Duration)> {
    let stat = std::fs::read_to_string(path)?;
    // The command name (field 2) is in parentheses and may hold spaces: count the
    // fields from the last ')'. utime and stime are fields 14 and 15.
    let (head, rest) = stat
        .rsplit_once(')')
        .ok_or_else(|| io::Error::other("unreadable /proc/<pid>/stat"))?;
    let name = head.split_once('(').map_or("", |(_, n)| n).to_owned();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> io::Result<u64> {
        fields
            .get(i)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| io::Error::other("unreadable /proc/<pid>/stat"))
    };
    // `rest` starts at field 3 (state), so field n is at index n - 3.
    Ok((name, TICK * (ticks(11)? + ticks(12)?) as u32))
}

/// Every thread of `pid` with its name and CPU time (a thread that ends while being
/// read is skipped).
fn thread_times(pid: u32) -> io::Result<HashMap<u32, (String, Duration)>> {
    let mut threads = HashMap::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let entry = entry?;
        let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        if let Ok(t) = stat_time(&format!("/proc/{pid}/task/{tid}/stat")) {
            threads.insert(tid, t);
        }
    }
    Ok(threads)
}

/// (busy, total) ticks over every core, from the first line of /proc/stat.
fn machine_time() -> io::Result<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat
        .lines()
        .next()
        .filter(|l| l.starts_with("cpu "))
        .ok_or_else(|| io::Error::other("unreadable /proc/stat"))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    Ok((total - idle, total))
}

/// `write_bytes` of /proc/<pid>/io.
fn disk_written(pid: u32) -> io::Result<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io"))?;
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| io::Error::other("unreadable /proc/<pid>/io"))
}

pub fn read(server_pid: u32) -> io::Result<Reading> {
    let (machine_busy, machine_total) = machine_time()?;
    Ok(Reading {
        server: process_time(&server_pid.to_string())?,
        threads: thread_times(server_pid)?,
        server_disk: disk_written(server_pid)?,
        client: process_time("self")?,
        machine_busy,
        machine_total,
    })
}

impl Reading {
    /// What was spent between `self` and a later reading.
    pub fn until(&self, later: &Reading, wall: Duration) -> Spent {
        let total = later
            .machine_total
            .saturating_sub(self.machine_total)
            .max(1);
        let busy = later.machine_busy.saturating_sub(self.machine_busy);
        let busiest = later
            .threads
            .iter()
            .map(|(tid, (name, t))| {
                let before = self.threads.get(tid).map_or(Duration::ZERO, |b| b.1);
                (name, t.saturating_sub(before))
            })
            .max_by_key(|(_, t)| *t)
            .map_or((String::new(), 0.0), |(name, t)| {
                (name.clone(), t.as_secs_f64() / wall.as_secs_f64().max(1e-9))
            });
        Spent {
            busiest,
            disk_bytes: later.server_disk.saturating_sub(self.server_disk),
            server: later.server.saturating_sub(self.server),
            client: later.client.saturating_sub(self.client),
            idle: 1.0 - busy as f64 / total as f64,
        }
    }
}

/// Reads at `warmup` after now and again `seconds` later: the window `hammer` measures.
pub async fn during(server_pid: u32, warmup: Duration, seconds: f64) -> io::Result<Spent> {
    tokio::time::sleep(warmup).await;
    let first = read(server_pid)?;
    let at = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    let later = read(server_pid)?;
    Ok(first.until(&later, at.elapsed()))
}
