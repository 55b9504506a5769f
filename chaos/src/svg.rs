//! The timeline chart: one row per worker task, its sections as bars (green: write accepted,
//! red: refused by fencing, grey: no write), faults as shaded bands, overlaps marked.

use std::fmt::Write as _;

use crate::analyze::{FaultKind, Report, Role};

const WIDTH: f64 = 1600.0;
const LEFT: f64 = 110.0;
const TOP: f64 = 40.0;
const ROW: f64 = 16.0;

fn color(kind: FaultKind) -> &'static str {
    match kind {
        FaultKind::Kill => "#d62728",
        FaultKind::Pause => "#9467bd",
        FaultKind::RestartPersist => "#1f77b4",
        FaultKind::RestartNoPersist => "#ff7f0e",
        FaultKind::Stall => "#8c564b",
        FaultKind::Delay => "#e377c2",
        FaultKind::Cut => "#17becf",
        FaultKind::Partition => "#2ca02c",
        FaultKind::NodePause => "#bcbd22",
        FaultKind::FailoverKill => "#7f7f7f",
        FaultKind::FailoverPause => "#393b79",
        FaultKind::FailoverObserved => "#000000",
        FaultKind::ShardStall => "#aec7e8",
        FaultKind::ServerCrash => "#843c39",
        FaultKind::Terminate => "#9edae5",
        FaultKind::PoolerRestart => "#e7969c",
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

pub(crate) fn render(report: &Report) -> String {
    let tasks = report.config.tasks;
    let rows = report.config.workers * tasks;
    let plot = WIDTH - LEFT - 20.0;
    let span = (report.t1.saturating_sub(report.t0)).max(1) as f64;
    let x = |t: u64| LEFT + (t.saturating_sub(report.t0) as f64 / span).min(1.0) * plot;
    let row_y = |slot: usize, task: usize| TOP + ((slot * tasks + task) as f64) * ROW;
    let height = TOP + rows as f64 * ROW + 60.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="16" font-size="13">lock holders over time: {} topology, seed {}, {} workers x {} tasks, {} s, {}</text>"#,
        report.config.topology.name(),
        report.config.seed,
        report.config.workers,
        tasks,
        report.config.duration.as_secs(),
        if report.ok() {
            "invariants held"
        } else {
            "INVARIANTS FAILED"
        }
    );
    // Seconds along the bottom.
    let seconds = (span / 1e9).ceil() as u64;
    let step = (seconds / 20).max(1);
    let bottom = TOP + rows as f64 * ROW;
    for s in (0..=seconds).step_by(step as usize) {
        let px = LEFT + (s as f64 * 1e9 / span).min(1.0) * plot;
        let _ = writeln!(
            svg,
            r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{bottom}" stroke="#eee"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{s}s</text>"##,
            bottom + 14.0
        );
    }
    for slot in 0..report.config.workers {
        for task in 0..tasks {
            let y = row_y(slot, task);
            let _ = writeln!(
                svg,
                r#"<text x="4" y="{:.1}">worker {slot} task {task}</text>"#,
                y + ROW - 4.0
            );
        }
    }
    // Faults under the bars: a band over the rows they hit.
    for fault in &report.faults {
        let (y0, y1) = match fault.hit.worker() {
            Some(slot) => (row_y(slot, 0), row_y(slot, tasks)),
            None => (TOP, bottom),
        };
        let x0 = x(fault.start);
        let w = (x(fault.end) - x0).max(2.0);
        let _ = writeln!(
            svg,
            r#"<rect x="{x0:.1}" y="{y0:.1}" width="{w:.1}" height="{:.1}" fill="{}" fill-opacity="0.3"><title>{} {}{}</title></rect>"#,
            y1 - y0,
            color(fault.kind),
            fault.kind.name(),
            escape(&fault.hit.label()),
            escape(&fault.detail)
        );
        let _ = writeln!(
            svg,
            r#"<text x="{x0:.1}" y="{:.1}" fill="{}" font-size="9">{}</text>"#,
            TOP - 4.0,
            color(fault.kind),
            fault.kind.name()
        );
    }
    for hold in &report.holds {
        let x0 = x(hold.enter);
        let w = (x(hold.exit) - x0).max(1.0);
        let read = hold.role == Role::Read;
        let fill = match hold.write {
            Some(w) if w.accepted && read => "#98df8a",
            Some(w) if w.accepted => "#2ca02c",
            Some(_) if read => "#ff9896",
            Some(_) => "#d62728",
            None => "#999",
        };
        let _ = writeln!(
            svg,
            r#"<rect x="{x0:.2}" y="{:.1}" width="{w:.2}" height="{:.1}" fill="{fill}"><title>{} token {} ({})</title></rect>"#,
            row_y(hold.slot, hold.task) + 3.0,
            ROW - 6.0,
            hold.role.name(),
            hold.token,
            if hold.continues {
                "continues after a lost lease"
            } else {
                "aborts on a lost lease"
            }
        );
    }
    for overlap in &report.overlaps {
        let x0 = x(overlap.start);
        let w = (x(overlap.end) - x0).max(2.0);
        let stroke = if overlap.explained_by.is_some() {
            "#000"
        } else {
            "#f0f"
        };
        let _ = writeln!(
            svg,
            r#"<rect x="{x0:.1}" y="{TOP}" width="{w:.1}" height="{:.1}" fill="none" stroke="{stroke}" stroke-dasharray="2,2"><title>overlap: {:?}</title></rect>"#,
            bottom - TOP,
            overlap.outcome
        );
    }
    let mut lx = LEFT;
    let ly = bottom + 34.0;
    for (label, fill) in [
        ("write accepted", "#2ca02c"),
        ("write refused (fencing)", "#d62728"),
        ("read accepted", "#98df8a"),
        ("read refused", "#ff9896"),
        ("no write", "#999"),
    ] {
        let _ = writeln!(
            svg,
            r#"<rect x="{lx}" y="{:.1}" width="10" height="10" fill="{fill}"/><text x="{}" y="{ly:.1}">{label}</text>"#,
            ly - 9.0,
            lx + 14.0
        );
        lx += 150.0;
    }
    for kind in report.config.topology.reported_kinds() {
        let _ = writeln!(
            svg,
            r#"<rect x="{lx}" y="{:.1}" width="10" height="10" fill="{}" fill-opacity="0.4"/><text x="{}" y="{ly:.1}">{}</text>"#,
            ly - 9.0,
            color(kind),
            lx + 14.0,
            kind.name()
        );
        lx += 115.0;
    }
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="{:.1}">dashed boxes: overlapping holders (black: explained by a fault, magenta: unexplained)</text>"#,
        ly + 16.0
    );
    svg.push_str("</svg>\n");
    svg
}
