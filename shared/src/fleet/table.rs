//! The fleet report as a text table, for the log and for a person at a terminal.

use std::fmt::Write as _;

use super::{FleetReport, Instance, Join, State, Unrecorded};

const HEADER: [&str; 7] = [
    "INSTANCE",
    "GENERATION",
    "STATE",
    "RESULT",
    "UNRESOLVED",
    "REASON",
    "AT",
];

impl FleetReport {
    /// A text table, one line per instance (records and instances without one, by instance
    /// id) after a header: instance, generation, state (how long behind or unhealthy), result,
    /// routes held until their host has an address, reason, when; then, when the instance list is missing, a line saying so and why;
    /// then, when the generator's manifest lists member accounts, their counts by state and
    /// a line for each account that is not `ok`.
    pub fn table(&self) -> String {
        let mut rows: Vec<[String; 7]> = self
            .fleet
            .iter()
            .map(recorded_row)
            .chain(self.without_record.iter().map(unrecorded_row))
            .collect();
        rows.sort_by(|a, b| a[0].cmp(&b[0]));
        let header = HEADER.map(str::to_owned);
        let mut widths = header.each_ref().map(|h| h.chars().count());
        for row in &rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&header).chain(&rows) {
            let mut line = String::new();
            for (column, (cell, width)) in row.iter().zip(widths).enumerate() {
                if column > 0 {
                    line.push_str("  ");
                }
                let _ = write!(line, "{cell:<width$}");
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        if let Join::Missing { reason } = &self.join {
            let _ = writeln!(
                out,
                "instance list missing ({reason}): the records alone; never reported, stale and \
                 unreachable instances are not known"
            );
        }
        self.estate_lines(&mut out);
        out
    }

    /// The member accounts: their counts by state, then a line for each that is not `ok`.
    fn estate_lines(&self, out: &mut String) {
        if self.accounts.is_empty() {
            return;
        }
        let counts = crate::accounts::counts(&self.accounts);
        let _ = write!(
            out,
            "member accounts: {} ok, {} failing, {} not onboarded, {} held",
            counts.ok, counts.failing, counts.not_onboarded, counts.held
        );
        // Zones never read yet: said only when some account has them.
        let pending = (counts.pending > 0).then(|| format!(", {} pending", counts.pending));
        let _ = writeln!(out, "{}", pending.unwrap_or_default());
        for account in self
            .accounts
            .iter()
            .filter(|a| a.state != crate::accounts::State::Ok)
        {
            let _ = writeln!(
                out,
                "  {}  {} since {}: {}",
                account.account,
                account.state.as_str(),
                account.since,
                account.reason
            );
        }
    }
}

fn recorded_row(i: &Instance) -> [String; 7] {
    let state = match i.state {
        State::Behind => format!("behind {}", duration(i.behind_seconds)),
        State::Unknown => format!("unknown {}", duration(i.behind_seconds)),
        state => state_cell(state, i.unhealthy_seconds),
    };
    [
        i.record.instance_id.clone(),
        i.record.generation.to_string(),
        state,
        i.record.result.as_str().to_owned(),
        i.record.unresolved_routes.to_string(),
        if i.record.reason.is_empty() {
            "-".to_owned()
        } else {
            i.record.reason.clone()
        },
        i.record.at.clone(),
    ]
}

fn unrecorded_row(u: &Unrecorded) -> [String; 7] {
    let reason = match u.state {
        State::Unreachable if u.ping_status.is_empty() => "SSM agent: no ping status".to_owned(),
        State::Unreachable => format!("SSM agent {}", u.ping_status),
        _ => "no fleet record".to_owned(),
    };
    [
        u.instance_id.clone(),
        "-".to_owned(),
        state_cell(u.state, u.unhealthy_seconds),
        "-".to_owned(),
        "-".to_owned(),
        reason,
        "-".to_owned(),
    ]
}

/// The state, and for how long when it is unhealthy and that is known.
fn state_cell(state: State, unhealthy_seconds: Option<u64>) -> String {
    match unhealthy_seconds {
        Some(seconds) if state.is_unhealthy() => {
            format!("{} {}", state.as_str(), duration(seconds))
        }
        _ => state.as_str().to_owned(),
    }
}

/// `59s`, `4m05s`, `3h07m`, `2d04h`: precise enough to read, short enough for a column.
pub(super) fn duration(seconds: u64) -> String {
    let (m, s) = (seconds / 60, seconds % 60);
    let (h, d) = (seconds / 3_600, seconds / 86_400);
    match seconds {
        0..60 => format!("{s}s"),
        60..3_600 => format!("{m}m{s:02}s"),
        3_600..86_400 => format!("{h}h{:02}m", m % 60),
        _ => format!("{d}d{:02}h", h % 24),
    }
}
