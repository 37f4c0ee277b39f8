//! The comparison as one hand-written SVG: a section per scenario, and in
//! each a lane per algorithm showing the units admitted over time, with the
//! window boundaries dashed.

use std::fmt::Write as _;

use limiter_core::backend::PerAlgorithm;
use limiter_core::{Algorithm, MAX_TIME_US};

use super::{compact_duration, ScenarioReport};

const WIDTH: f64 = 1100.0;
const PLOT_LEFT: f64 = 200.0;
const PLOT_RIGHT: f64 = 1040.0;
const LANE_HEIGHT: f64 = 64.0;
const LANE_GAP: f64 = 16.0;
const SECTION_HEADER: f64 = 76.0;
const AXIS_SPACE: f64 = 58.0;
const SECTION_GAP: f64 = 20.0;
/// About this many bars per lane.
const BINS: u64 = 200;
/// Window boundaries are drawn only when there are at most this many.
const MAX_BOUNDARIES: u64 = 120;
/// The most time-axis ticks drawn: the step is at least a tenth of the
/// span, so 11 cover it; the cap keeps the loop bounded whatever the input.
const MAX_AXIS_TICKS: u64 = 12;

/// The height of `report`'s section: its lanes (five algorithms, or one
/// per `--set`, up to eight), its header and its time axis.
fn section_height(report: &ScenarioReport) -> f64 {
    SECTION_HEADER + report.results.len() as f64 * (LANE_HEIGHT + LANE_GAP) + AXIS_SPACE
}

/// The lowest bar drawn, in pixels: a lane that admits a smooth trickle
/// (the leaky bucket, whose bins hold a unit or two beside another lane's
/// burst of 100) is a band that can be seen, not a hairline.
const MIN_BAR_HEIGHT: f64 = 3.0;

/// A lane whose tallest bar is below this share of the tallest in every lane
/// (a trickle beside a burst) is also outlined on its own scale.
const OWN_SCALE_BELOW: f64 = 0.25;
/// The top of an own-scale outline, below its label.
const OWN_SCALE_TOP: f64 = 14.0;

/// The colour of each algorithm's lane. The leaky bucket's is a dark purple:
/// its bars are the lowest, so they need the strongest contrast with the
/// lane's grey background.
const COLOURS: PerAlgorithm<&str> = PerAlgorithm {
    fixed_window: "#d62728",
    sliding_log: "#1f77b4",
    sliding_counter: "#2ca02c",
    token_bucket: "#ff7f0e",
    leaky_bucket: "#6a3d9a",
};

/// `max/W n` for every window the lane's burst was measured over (the
/// scenario's, or each of its sets' windows), as the table's columns.
fn bursts(result: &super::AlgorithmResult) -> String {
    let bursts: Vec<String> = result
        .max_units_in_windows
        .iter()
        .map(|&(window_us, most)| format!("max/{} {most}", compact_duration(window_us)))
        .collect();
    bursts.join(", ")
}

/// The colour of an algorithm's lane.
fn colour(algorithm: Algorithm) -> &'static str {
    COLOURS[algorithm]
}

/// The whole document, sections stacked vertically in scenario order.
pub(crate) fn render(reports: &[ScenarioReport]) -> String {
    let height = SECTION_GAP
        + reports
            .iter()
            .map(|report| section_height(report) + SECTION_GAP)
            .sum::<f64>();
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="Helvetica, Arial, sans-serif">
<title>limiter compare: admitted units over time per algorithm</title>
<rect width="100%" height="100%" fill="white"/>"#
    );
    let mut top = SECTION_GAP;
    for report in reports {
        render_section(&mut out, report, top);
        top += section_height(report) + SECTION_GAP;
    }
    out.push_str("</svg>\n");
    out
}

fn render_section(out: &mut String, report: &ScenarioReport, top: f64) {
    let scenario = &report.scenario;
    let window_us = scenario.boundary_window_us();
    let window = compact_duration(window_us);
    let boundary_label = if scenario.sets.is_some() {
        format!("the shortest window's boundary ({window})")
    } else {
        format!("window boundary ({window})")
    };

    // The time range: every request and every admission, snapped to windows.
    // Requests after 2^53 µs are errors, never drawn: they do not stretch
    // the axis (and every sum below stays far from u64::MAX).
    let times = scenario
        .requests
        .requests
        .iter()
        .map(|r| r.time_us)
        .filter(|&t| t <= MAX_TIME_US)
        .chain(
            report
                .results
                .iter()
                .flat_map(|r| r.admissions.iter().flatten().map(|a| a.0)),
        );
    let (min, max) = times.fold((u64::MAX, 0), |(lo, hi), t| (lo.min(t), hi.max(t)));
    let (min, max) = if min > max { (0, 0) } else { (min, max) };
    let start = min / window_us * window_us;
    let end = (max / window_us)
        .saturating_add(1)
        .saturating_mul(window_us)
        .max(start.saturating_add(window_us));
    let span = (end - start).max(1);
    let bin = nice_step(span.div_ceil(BINS));
    let bins = usize::try_from(span.div_ceil(bin)).unwrap_or(usize::MAX);

    let counts: Vec<Vec<u64>> = report
        .results
        .iter()
        .map(|r| {
            let mut counts = vec![0u64; bins];
            for &(t, units) in r.admissions.iter().flatten() {
                let i = usize::try_from((t - start) / bin).map_or(bins - 1, |i| i.min(bins - 1));
                counts[i] = counts[i].saturating_add(units);
            }
            counts
        })
        .collect();
    let tallest = counts.iter().flatten().copied().max().unwrap_or(0).max(1);
    // The bars of a scenario of several keys are their sum; max/W is per key.
    let keys = scenario.requests.keys.len();
    let x = |t: u64| PLOT_LEFT + (t - start) as f64 / span as f64 * (PLOT_RIGHT - PLOT_LEFT);
    let lanes_bottom =
        SECTION_HEADER + report.results.len() as f64 * (LANE_HEIGHT + LANE_GAP) - LANE_GAP;

    let _ = writeln!(
        out,
        r##"<g class="scenario" data-scenario="{name}" transform="translate(0,{top})">
<text x="20" y="18" font-size="17" font-weight="bold">{name}: {headline}</text>
<text x="20" y="38" font-size="12" fill="#444">{description}{per_key}</text>
<text x="20" y="58" font-size="11" fill="#444">Bars: units admitted per {bin_label}{summed}, when they proceed (t + wait; the leaky bucket queues), same scale in every lane (tallest bar: {tallest}).</text>
<line x1="{legend_x}" y1="54" x2="{legend_x2}" y2="54" stroke="#333" stroke-dasharray="4 3"/>
<text x="{legend_text}" y="58" font-size="11" fill="#444">{boundary_label}</text>"##,
        name = escape(&scenario.name),
        headline = escape(&scenario.headline()),
        description = escape(&scenario.description),
        bin_label = compact_duration(bin),
        summed = match keys {
            1 => String::new(),
            keys => format!(", all {keys} keys summed"),
        },
        per_key = match keys {
            1 => "",
            _ => " — bars sum every key; a lane's max/W is its busiest key's",
        },
        legend_x = PLOT_RIGHT - 150.0,
        legend_x2 = PLOT_RIGHT - 126.0,
        legend_text = PLOT_RIGHT - 120.0,
    );

    for (lane, (result, counts)) in report.results.iter().zip(&counts).enumerate() {
        let lane_top = SECTION_HEADER + lane as f64 * (LANE_HEIGHT + LANE_GAP);
        let fill = colour(result.algorithm);
        let peak = counts.iter().copied().max().unwrap_or(0);
        let own_scale = peak > 0 && (peak as f64) < OWN_SCALE_BELOW * tallest as f64;
        // An outlined lane's own scale is named beside its title, in its
        // colour, where the eye starts reading the lane.
        let own_scale_note = match own_scale {
            true => format!(
                r#"<text class="own-scale-title" x="{}" y="{}" text-anchor="end" font-size="10" font-style="italic" fill="{fill}">outline: own scale, 0–{peak}</text>"#,
                PLOT_LEFT - 12.0,
                LANE_HEIGHT / 2.0 + 26.0
            ),
            false => String::new(),
        };
        // The baseline comes before the bars, so it never covers the lowest.
        let _ = writeln!(
            out,
            r##"<g class="lane" data-algorithm="{alg}" transform="translate(0,{lane_top})">
<rect class="lane-background" x="{PLOT_LEFT}" y="0" width="{plot_width}" height="{LANE_HEIGHT}" fill="#f3f3f3"/>
<text x="{title_x}" y="{title_y}" text-anchor="end" font-size="14" font-weight="bold" fill="{fill}">{alg}</text>
<text x="{title_x}" y="{subtitle_y}" text-anchor="end" font-size="11" fill="#555">admitted {admitted}, {bursts}</text>
{own_scale_note}
<text x="{tick_x}" y="9" font-size="10" fill="#777">{tallest}</text>
<text x="{tick_x}" y="{LANE_HEIGHT}" font-size="10" fill="#777">0</text>
<line class="lane-baseline" x1="{PLOT_LEFT}" y1="{LANE_HEIGHT}" x2="{PLOT_RIGHT}" y2="{LANE_HEIGHT}" stroke="#999"/>"##,
            alg = escape(&result.label),
            plot_width = PLOT_RIGHT - PLOT_LEFT,
            title_x = PLOT_LEFT - 12.0,
            title_y = LANE_HEIGHT / 2.0 - 2.0,
            subtitle_y = LANE_HEIGHT / 2.0 + 13.0,
            admitted = result.admitted,
            bursts = bursts(result),
            tick_x = PLOT_RIGHT + 5.0,
        );
        let bar_width = bin as f64 / span as f64 * (PLOT_RIGHT - PLOT_LEFT);
        if own_scale {
            own_scale_outline(out, counts, peak, fill, &|i| {
                x(start
                    .saturating_add((i as u64).saturating_mul(bin))
                    .min(end))
            });
            let _ = writeln!(
                out,
                r#"<text class="own-scale-label" x="{}" y="10" text-anchor="end" font-size="10" fill="{fill}">outline: own scale (tallest bar {peak})</text>"#,
                PLOT_RIGHT - 4.0
            );
        }
        for (i, &count) in counts.iter().enumerate() {
            if count == 0 {
                continue;
            }
            // At least MIN_BAR_HEIGHT, so a smooth trickle stays visible.
            let height = (count as f64 / tallest as f64 * LANE_HEIGHT).max(MIN_BAR_HEIGHT);
            let _ = writeln!(
                out,
                r#"<rect class="bar" x="{:.2}" y="{:.2}" width="{:.2}" height="{:.2}" fill="{fill}"/>"#,
                x(start + i as u64 * bin),
                LANE_HEIGHT - height,
                (bar_width - 0.3).max(0.6),
                height
            );
        }
        out.push_str("</g>\n");
    }

    // Window boundaries across every lane.
    let boundaries = span / window_us + 1;
    if boundaries <= MAX_BOUNDARIES {
        out.push_str(
            "<g class=\"window-boundaries\" stroke=\"#333\" stroke-dasharray=\"4 3\" stroke-width=\"1\">\n",
        );
        for k in 0..boundaries {
            let bx = x(start.saturating_add(k.saturating_mul(window_us)));
            let _ = writeln!(
                out,
                r#"<line x1="{bx:.2}" y1="{}" x2="{bx:.2}" y2="{}"/>"#,
                SECTION_HEADER - 6.0,
                lanes_bottom + 4.0
            );
        }
        out.push_str("</g>\n");
    }

    // The time axis.
    let axis_y = lanes_bottom + 6.0;
    let _ = writeln!(
        out,
        r##"<g class="x-axis" font-size="11" fill="#333">
<line x1="{PLOT_LEFT}" y1="{axis_y}" x2="{PLOT_RIGHT}" y2="{axis_y}" stroke="#333"/>"##
    );
    let step = nice_step(span.div_ceil(10).max(1));
    let first = start.div_ceil(step).saturating_mul(step);
    let ticks = (0..MAX_AXIS_TICKS)
        .map_while(|k| {
            k.checked_mul(step)
                .and_then(|offset| first.checked_add(offset))
        })
        .take_while(|&t| t <= end);
    for t in ticks {
        let tx = x(t);
        let _ = writeln!(
            out,
            r##"<line x1="{tx:.2}" y1="{axis_y}" x2="{tx:.2}" y2="{}" stroke="#333"/>
<text x="{tx:.2}" y="{}" text-anchor="middle">{}</text>"##,
            axis_y + 5.0,
            axis_y + 18.0,
            seconds(t - start)
        );
    }
    let axis_title = if start == 0 {
        "time (s)".to_owned()
    } else {
        format!("time (s) since t = {start} us")
    };
    let _ = writeln!(
        out,
        r##"<text x="{}" y="{}" text-anchor="middle" font-size="12">{axis_title}</text>
</g>
<text transform="translate(16,{}) rotate(-90)" text-anchor="middle" font-size="12" fill="#333">units admitted per {}</text>
</g>"##,
        (PLOT_LEFT + PLOT_RIGHT) / 2.0,
        axis_y + 38.0,
        (SECTION_HEADER + lanes_bottom) / 2.0,
        compact_duration(bin),
    );
}

/// A lane's bars on its own scale (its tallest bar reaching
/// [`OWN_SCALE_TOP`]), as one filled, stroked step outline from its first
/// non-empty bin to its last; `bin_x(i)` is the left edge of bin `i`.
fn own_scale_outline(
    out: &mut String,
    counts: &[u64],
    peak: u64,
    colour: &str,
    bin_x: &dyn Fn(usize) -> f64,
) {
    let (Some(first), Some(last)) = (
        counts.iter().position(|&c| c > 0),
        counts.iter().rposition(|&c| c > 0),
    ) else {
        return;
    };
    let y = |count: u64| LANE_HEIGHT - count as f64 / peak as f64 * (LANE_HEIGHT - OWN_SCALE_TOP);
    let mut d = format!("M{:.2},{LANE_HEIGHT}", bin_x(first));
    for (i, &count) in counts.iter().enumerate().take(last + 1).skip(first) {
        let _ = write!(
            d,
            " L{:.2},{:.2} L{:.2},{:.2}",
            bin_x(i),
            y(count),
            bin_x(i + 1),
            y(count)
        );
    }
    let _ = writeln!(
        out,
        r#"<path class="own-scale" d="{d} L{:.2},{LANE_HEIGHT} Z" fill="{colour}" fill-opacity="0.15" stroke="{colour}" stroke-width="1.5"/>"#,
        bin_x(last + 1)
    );
}

/// The smallest of 1, 2, 5 × 10^k that is at least `at_least` (and at least 1).
fn nice_step(at_least: u64) -> u64 {
    let mut base = 1u64;
    loop {
        for m in [1, 2, 5] {
            let step = base.saturating_mul(m);
            if step >= at_least || step == u64::MAX {
                return step;
            }
        }
        base = base.saturating_mul(10);
    }
}

/// Microseconds as seconds, without trailing zeros: `9`, `0.25`.
fn seconds(micros: u64) -> String {
    let whole = micros / 1_000_000;
    let fraction = micros % 1_000_000;
    if fraction == 0 {
        whole.to_string()
    } else {
        let digits = format!("{fraction:06}");
        format!("{whole}.{}", digits.trim_end_matches('0'))
    }
}

/// Text and attribute escaping. XML 1.0 allows no control character but
/// tab, LF and CR, nor U+FFFE or U+FFFF, not even as a character
/// reference, so those (a trace's file name may hold one) become U+FFFD.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            '\u{0}'..='\u{1f}' | '\u{fffe}' | '\u{ffff}' => out.push('\u{fffd}'),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_and_labels_are_round() {
        assert_eq!(nice_step(0), 1);
        assert_eq!(nice_step(3), 5);
        assert_eq!(nice_step(100_000), 100_000);
        assert_eq!(nice_step(100_001), 200_000);
        assert_eq!(seconds(9_000_000), "9");
        assert_eq!(seconds(250_000), "0.25");
        assert_eq!(escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
        assert_eq!(
            escape("a\u{1}b\tc\u{1f}\u{ffff}"),
            "a\u{fffd}b\tc\u{fffd}\u{fffd}"
        );
    }
}
