//! What this process costs, read from procfs: CPU time and resident memory. Plain parsing of
//! `/proc/self/stat` and `/proc/self/status`, since the workspace forbids `unsafe` (no
//! `getrusage` through libc).

use std::io;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// User plus system CPU time of all threads of this process so far.
pub fn cpu_time() -> io::Result<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let ticks = cpu_ticks(&stat)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unexpected /proc/self/stat"))?;
    Ok(Duration::from_secs_f64(ticks as f64 / clock_ticks() as f64))
}

/// Resident memory of this process (`VmRSS`), in bytes.
pub fn resident_bytes() -> io::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    vm_rss(&status)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no VmRSS in /proc/self/status"))
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line. The command name (field 2) may
/// hold spaces and parentheses, so fields are counted from the last `)`.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts with field 3 (state): utime is the 12th field after the name, stime the 13th.
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

fn vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Clock ticks per second (`getconf CLK_TCK`); 100, the Linux user-space value, if unknown.
fn clock_ticks() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|text| text.trim().parse().ok())
            .filter(|&ticks| ticks > 0)
            .unwrap_or(100)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_counted_after_a_command_name_with_spaces_and_parens() {
        let stat = "4242 (lock bench (x)) S 1 4242 4242 0 -1 4194304 500 0 0 0 \
                    37 5 0 0 20 0 3 0 100 1000 200 18446744073709551615";
        assert_eq!(cpu_ticks(stat), Some(42));
    }

    #[test]
    fn vm_rss_is_read_in_bytes() {
        let status = "Name:\tlock-bench\nVmPeak:\t  9000 kB\nVmRSS:\t    1234 kB\nThreads:\t3\n";
        assert_eq!(vm_rss(status), Some(1234 * 1024));
    }

    #[test]
    fn this_process_has_cpu_time_and_memory() {
        assert!(resident_bytes().expect("procfs") > 0);
        cpu_time().expect("procfs");
    }
}
