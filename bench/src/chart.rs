//! A bar chart of handover latency per contender, as SVG written by hand: p50 and p99 side by
//! side on a logarithmic axis (the contenders differ by orders of magnitude).

use std::fmt::Write as _;

/// One contender's bars.
pub struct Bars {
    pub contender: String,
    /// Microseconds.
    pub p50: f64,
    pub p99: f64,
}

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 400.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 60.0;
const P50_COLOUR: &str = "#2b6cb0";
const P99_COLOUR: &str = "#90cdf4";

/// The SVG document; `title` goes on top, e.g. the scenario and machine.
pub fn handover_svg(title: &str, bars: &[Bars]) -> String {
    let values = bars
        .iter()
        .flat_map(|b| [b.p50, b.p99])
        .filter(|v| *v > 0.0);
    let (low, high) = values.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (low, high) = if low > high { (1.0, 10.0) } else { (low, high) };
    // Whole decades around the data, one more below so the shortest bar still shows.
    let first = low.log10().floor() as i32 - 1;
    let last = (high.log10().ceil() as i32).max(first + 1);
    let plot_height = HEIGHT - TOP - BOTTOM;
    let plot_width = WIDTH - LEFT - RIGHT;
    let y = |micros: f64| {
        let fraction =
            (micros.max(10f64.powi(first)).log10() - f64::from(first)) / f64::from(last - first);
        TOP + plot_height * (1.0 - fraction)
    };

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>"#
    );
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="15" font-weight="bold">{}</text>"#,
        WIDTH / 2.0,
        escape(title)
    );
    for decade in first..=last {
        let at = y(10f64.powi(decade));
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" x2="{}" y1="{at:.1}" y2="{at:.1}" stroke="#ddd"/>"##,
            WIDTH - RIGHT
        );
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT - 6.0,
            at + 4.0,
            duration_label(10f64.powi(decade))
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="16" y="{:.1}" transform="rotate(-90 16 {:.1})" text-anchor="middle">handover latency, log scale (lower is better)</text>"#,
        TOP + plot_height / 2.0,
        TOP + plot_height / 2.0
    );

    let group = plot_width / bars.len().max(1) as f64;
    let bar = (group * 0.3).min(60.0);
    for (i, b) in bars.iter().enumerate() {
        let centre = LEFT + group * (i as f64 + 0.5);
        for (offset, value, colour) in [(-bar, b.p50, P50_COLOUR), (0.0, b.p99, P99_COLOUR)] {
            let top = y(value);
            let x = centre + offset;
            let _ = writeln!(
                svg,
                r#"<rect x="{x:.1}" y="{top:.1}" width="{bar:.1}" height="{:.1}" fill="{colour}"/>"#,
                TOP + plot_height - top
            );
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="11">{}</text>"#,
                x + bar / 2.0,
                top - 4.0,
                duration_label(value)
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{centre:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            HEIGHT - BOTTOM + 18.0,
            escape(&b.contender)
        );
    }
    let _ = writeln!(
        svg,
        r##"<line x1="{LEFT}" x2="{}" y1="{:.1}" y2="{:.1}" stroke="#333"/>"##,
        WIDTH - RIGHT,
        TOP + plot_height,
        TOP + plot_height
    );
    let legend_y = HEIGHT - 18.0;
    let _ = writeln!(
        svg,
        r#"<rect x="{LEFT}" y="{:.1}" width="12" height="12" fill="{P50_COLOUR}"/><text x="{}" y="{legend_y:.1}">p50</text>"#,
        legend_y - 10.0,
        LEFT + 16.0
    );
    let _ = writeln!(
        svg,
        r#"<rect x="{}" y="{:.1}" width="12" height="12" fill="{P99_COLOUR}"/><text x="{}" y="{legend_y:.1}">p99</text>"#,
        LEFT + 60.0,
        legend_y - 10.0,
        LEFT + 76.0
    );
    svg.push_str("</svg>\n");
    svg
}

/// `42 µs`, `1.5 ms`, `120 ms`, `1 s`.
fn duration_label(micros: f64) -> String {
    if micros >= 1e6 {
        format!("{} s", crate::report::number(micros / 1e6))
    } else if micros >= 1e3 {
        format!("{} ms", crate::report::number(micros / 1e3))
    } else {
        format!("{} µs", crate::report::number(micros))
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_pair_of_bars_per_contender_and_escaped_names() {
        let svg = handover_svg(
            "handover",
            &[
                Bars {
                    contender: "a<b>".into(),
                    p50: 150.0,
                    p99: 900.0,
                },
                Bars {
                    contender: "rslock".into(),
                    p50: 20_000.0,
                    p99: 150_000.0,
                },
            ],
        );
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("a&lt;b&gt;"));
        assert_eq!(svg.matches(&format!("fill=\"{P50_COLOUR}\"")).count(), 3);
        assert!(svg.contains("150 µs") && svg.contains("20 ms"));
    }

    #[test]
    fn labels_pick_a_unit() {
        assert_eq!(duration_label(250.0), "250 µs");
        assert_eq!(duration_label(1500.0), "1.50 ms");
        assert_eq!(duration_label(2e6), "2 s");
    }
}
