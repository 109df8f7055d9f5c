//! The pace the engine sends at: the fill's, judged each second, or the steady cap.

use std::time::Instant;

use super::Engine;
use crate::dns::schedule::PaceChange;
use crate::log::log;

impl Engine {
    /// Judges the last second at `now` and sets the cap that applies. Only a fill's seconds
    /// can back the fill's pace off: time-outs in steady state are no sign that the fill's
    /// pace is too fast, and counting them would slow the next fill for an outage.
    pub(super) fn set_pace(&mut self, now: Instant) {
        let change = if self.filling() {
            self.fill.judge(now, self.knobs.timeout)
        } else {
            self.fill.judge_steady(now)
        };
        match change {
            Some(PaceChange::BackedOff {
                from,
                to,
                timeouts,
                sent,
            }) => {
                self.stats.backoffs += 1;
                self.totals.backoffs += 1;
                if self.verbose {
                    log(format_args!(
                        "fill: {timeouts} time-outs against {sent} queries in the last second (the resolver drops queries): fill pace {from} -> {to} queries/s"
                    ));
                }
            }
            Some(PaceChange::Recovered { from, to })
                if self.verbose && to == self.knobs.fill_qps.max(self.knobs.max_qps) =>
            {
                log(format_args!(
                    "fill: no time-outs, fill pace {from} -> {to} queries/s (full)"
                ));
            }
            _ => {}
        }
        let cap = if self.filling() {
            self.fill.rate()
        } else {
            self.knobs.max_qps
        };
        self.pacer.set_cap(cap);
    }
}
