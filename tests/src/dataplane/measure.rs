//! CPU from /proc: clock ticks, a process's ticks, its children.

use super::*;

/// Clock ticks per second, the unit of `utime` and `stime` in `/proc/<pid>/stat`.
pub fn clock_ticks() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8_lossy(&out.stdout).trim().parse().ok())
        .unwrap_or(100)
}

/// The fields of `/proc/<pid>/stat` after the command name (field 3, the state, first).
pub(super) fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(") ")?.1;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// `utime + stime` of a process (every thread), in clock ticks.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let fields = stat_fields(pid)?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Live (not zombie) children of `parent`.
pub fn children(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            stat_fields(*pid).is_some_and(|f| {
                f.first().map(String::as_str) != Some("Z")
                    && f.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(parent)
            })
        })
        .collect()
}
