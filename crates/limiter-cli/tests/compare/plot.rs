//! The plot `limiter compare --plot` writes: well-formed SVG, its
//! sections, lanes and axis, and lanes one tells apart.

use super::*;

/// Eight `--set` lanes (the most a run takes) fit their section: each
/// section's time axis lies below its last lane and above the next
/// section, and the document is tall enough for the last one; each lane
/// names the window of every burst it reports.
#[test]
fn a_section_of_eight_sets_holds_its_lanes_and_axis() {
    let dir = std::env::temp_dir().join(format!("limiter-cli-sets-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("plot.svg");
    let mut args = vec![
        "--scenario",
        "boundary-burst",
        "--scenario",
        "steady-over-limit",
    ];
    let mut sets: Vec<String> = (1..=7).map(|l| format!("fixed-window:{l}0/10s")).collect();
    sets.push("sliding-log:50/1s;sliding-log:100/10s".to_owned());
    for set in &sets {
        args.extend(["--set", set.as_str()]);
    }
    args.extend(["--plot", path.to_str().unwrap()]);
    compare(&args);
    let svg = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    check_well_formed(&svg);
    // A lane's bursts are labelled by the windows they were measured over,
    // as the table's columns: the article's case under 50 a second and
    // 100 per 10 s admits 50 in a second and 100 in ten.
    assert!(
        section(&svg, "boundary-burst").contains(">admitted 100, max/1s 50, max/10s 100</text>"),
        "the tiered lane's bursts"
    );
    // The heading states no rate of the scenario's, which no lane runs
    // under, and the boundaries are the shortest window's (1 s).
    assert!(
        section(&svg, "boundary-burst")
            .contains(">boundary-burst: each lane under its --set</text>"),
        "the heading"
    );
    assert!(
        section(&svg, "boundary-burst").contains(">the shortest window's boundary (1s)</text>"),
        "the boundaries' legend"
    );

    let number_after = |text: &str, marker: &str| -> f64 {
        let rest = &text[text.find(marker).unwrap_or_else(|| panic!("{marker}")) + marker.len()..];
        rest[..rest.find(['"', ')']).unwrap()].parse().unwrap()
    };
    let height = number_after(&svg, "height=\"");
    let tops: Vec<f64> = svg
        .split("<g class=\"scenario\"")
        .skip(1)
        .map(|section| number_after(section, "translate(0,"))
        .collect();
    assert_eq!(tops.len(), 2);
    for (i, section) in svg.split("<g class=\"scenario\"").skip(1).enumerate() {
        assert_eq!(section.matches("<g class=\"lane\"").count(), 8);
        let last_lane_top = section
            .split("<g class=\"lane\"")
            .skip(1)
            .map(|lane| number_after(lane, "translate(0,"))
            .fold(0.0, f64::max);
        let axis = tops[i]
            + number_after(
                section.split("<g class=\"x-axis\"").nth(1).unwrap(),
                "y1=\"",
            );
        assert!(
            axis > tops[i] + last_lane_top,
            "section {i}: axis {axis} over its lanes"
        );
        let below = tops.get(i + 1).copied().unwrap_or(height);
        assert!(
            axis + 30.0 < below,
            "section {i}: axis {axis} reaches {below}"
        );
    }
}

#[test]
fn the_plot_has_five_lanes_per_scenario() {
    let dir = std::env::temp_dir().join(format!("limiter-cli-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("plot.svg");
    let table = compare(&["--plot", path.to_str().unwrap()]);
    assert!(table.starts_with("boundary-burst"));
    let svg = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();

    check_well_formed(&svg);
    assert!(svg.contains("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert_eq!(svg.matches("<g class=\"scenario\"").count(), 4);
    assert_eq!(
        svg.matches("<g class=\"lane\"").count(),
        4 * Algorithm::ALL.len()
    );
    for algorithm in algorithms() {
        assert_eq!(
            svg.matches(&format!("<g class=\"lane\" data-algorithm=\"{algorithm}\""))
                .count(),
            4
        );
        assert!(svg.contains(&format!(">{algorithm}</text>")), "lane title");
    }
    // The article's section: windows from 0 to 30 s (the leaky bucket's
    // queued requests proceed until about 21 s), so boundaries at 0, 10, 20
    // and 30 s.
    let burst = section(&svg, "boundary-burst");
    assert_eq!(burst.matches("stroke-dasharray=\"4 3\"").count(), 2);
    let boundaries = burst
        .split("<g class=\"window-boundaries\"")
        .nth(1)
        .unwrap()
        .split("</g>")
        .next()
        .unwrap();
    assert_eq!(boundaries.matches("<line").count(), 4);
    assert!(burst.contains(">time (s)</text>"), "x axis label");
    assert!(burst.contains("units admitted per 200ms"), "y axis label");
    assert!(burst.contains(">admitted 200, max/10s 200</text>"));
    assert!(burst.contains(">admitted 100, max/10s 100</text>"));
    assert!(!burst.contains("keys summed"), "one key: nothing summed");
    // Many keys: the bars are their sum, max/W is per key, and both say so.
    let many = section(&svg, "many-keys");
    assert!(many.contains("units admitted per 20ms, all 1000 keys summed"));
    assert!(many.contains("a lane's max/W is its busiest key's"));
}

#[test]
fn the_leaky_bucket_lane_of_the_plot_is_clearly_visible() {
    let dir = std::env::temp_dir().join(format!("limiter-cli-leaky-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("plot.svg");
    compare(&[
        "--scenario",
        "boundary-burst",
        "--plot",
        path.to_str().unwrap(),
    ]);
    let svg = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    check_well_formed(&svg);

    // Each lane's bar colour; the leaky bucket's differs from every other.
    let lanes: BTreeMap<&str, &str> = algorithms()
        .into_iter()
        .map(|algorithm| (algorithm, lane(&svg, algorithm)))
        .collect();
    let fills = |lane: &str| -> Vec<String> {
        tags(lane, "<rect class=\"bar\"")
            .map(|bar| attribute(bar, "fill").to_owned())
            .collect()
    };
    let leaky = lanes["leaky-bucket"];
    let leaky_fills = fills(leaky);
    // 100 queued requests let out one by one over 10 s: about 50 bins.
    assert!(leaky_fills.len() >= 40, "{} bars", leaky_fills.len());
    let colour = leaky_fills[0].clone();
    assert!(leaky_fills.iter().all(|f| *f == colour), "{leaky_fills:?}");
    for (algorithm, lane) in &lanes {
        if *algorithm != "leaky-bucket" {
            let theirs = fills(lane);
            assert!(
                !theirs.is_empty() && !theirs.contains(&colour),
                "{algorithm}"
            );
        }
    }
    // Dark enough on the lane's grey: WCAG contrast of at least 4.5.
    let background = attribute(
        tags(leaky, "<rect class=\"lane-background\"")
            .next()
            .unwrap(),
        "fill",
    );
    assert!(
        contrast(&colour, background) >= 4.5,
        "{colour} on {background}"
    );

    // Its bars (1 or 2 units beside the others' 100) are a band, not a
    // hairline, and the baseline is drawn under them, not over them.
    for bar in tags(leaky, "<rect class=\"bar\"") {
        let height: f64 = attribute(bar, "height").parse().unwrap();
        assert!(height >= 3.0, "{bar}");
    }
    assert!(leaky.find("class=\"lane-baseline\"").unwrap() < leaky.find("class=\"bar\"").unwrap());

    // And it is outlined on its own scale, most of the lane's height, in its
    // colour; the lanes with a burst of 100 are not.
    let outline = tags(leaky, "<path class=\"own-scale\"")
        .next()
        .expect("an own-scale outline");
    assert_eq!(attribute(outline, "stroke"), colour);
    assert_eq!(attribute(outline, "fill"), colour);
    let ys: Vec<f64> = attribute(outline, "d")
        .split([' ', 'Z'])
        .filter_map(|point| point.split_once(','))
        .map(|(_, y)| y.parse().unwrap())
        .collect();
    let lane_height = 64.0;
    let top = ys.iter().copied().fold(f64::INFINITY, f64::min);
    assert!(lane_height - top >= 40.0, "outline {top}: {ys:?}");
    assert!(leaky.contains(">outline: own scale (tallest bar 2)</text>"));
    // Named beside the lane's title too, in its colour.
    let note = tags(leaky, "<text class=\"own-scale-title\"")
        .next()
        .expect("the own scale named by the title");
    assert_eq!(attribute(note, "fill"), colour);
    assert!(leaky.contains(">outline: own scale, 0–2</text>"));
    for algorithm in [
        "fixed-window",
        "sliding-log",
        "sliding-counter",
        "token-bucket",
    ] {
        assert!(!lanes[algorithm].contains("own-scale"), "{algorithm}");
    }
}

/// A trace's file name heads its section; characters XML forbids in it
/// (a control character) are replaced, and the plot stays well-formed.
#[test]
fn a_trace_named_with_a_control_character_makes_a_well_formed_plot() {
    let dir = std::env::temp_dir().join(format!("limiter-cli-control-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("ctl\u{1}.csv");
    std::fs::write(&trace, "t_us,key,cost\n5,a,1\n").unwrap();
    let path = dir.join("plot.svg");
    compare(&[
        "--trace",
        trace.to_str().unwrap(),
        "--plot",
        path.to_str().unwrap(),
    ]);
    let svg = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    check_well_formed(&svg);
    assert!(
        svg.contains("ctl\u{fffd}.csv"),
        "the trace's name, replaced"
    );
}

/// The text of the first lane of `algorithm` in `svg`.
fn lane<'a>(svg: &'a str, algorithm: &str) -> &'a str {
    let start = svg
        .find(&format!("<g class=\"lane\" data-algorithm=\"{algorithm}\""))
        .unwrap_or_else(|| panic!("no {algorithm} lane"));
    let rest = &svg[start..];
    &rest[..rest.find("</g>").unwrap()]
}

/// Every tag of `text` that starts with `start`, up to its `>`.
fn tags<'a>(text: &'a str, start: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    text.match_indices(start)
        .map(move |(i, _)| &text[i..i + text[i..].find('>').unwrap() + 1])
}

/// The value of `name="…"` in `tag`.
fn attribute<'a>(tag: &'a str, name: &str) -> &'a str {
    let needle = format!(" {name}=\"");
    let start = tag
        .find(&needle)
        .unwrap_or_else(|| panic!("no {name} in {tag}"))
        + needle.len();
    &tag[start..start + tag[start..].find('"').unwrap()]
}

/// The WCAG 2 contrast ratio of two `#rrggbb` colours.
fn contrast(a: &str, b: &str) -> f64 {
    let luminance = |hex: &str| -> f64 {
        let channel = |i: usize| {
            let c = f64::from(u8::from_str_radix(&hex[1 + 2 * i..3 + 2 * i], 16).unwrap()) / 255.0;
            if c <= 0.039_28 {
                c / 12.92
            } else {
                ((c + 0.055) / 1.055).powf(2.4)
            }
        };
        0.2126 * channel(0) + 0.7152 * channel(1) + 0.0722 * channel(2)
    };
    let (la, lb) = (luminance(a), luminance(b));
    (la.max(lb) + 0.05) / (la.min(lb) + 0.05)
}

/// The text of one scenario's section.
fn section<'a>(svg: &'a str, name: &str) -> &'a str {
    let start = svg
        .find(&format!("<g class=\"scenario\" data-scenario=\"{name}\""))
        .unwrap();
    let rest = &svg[start..];
    let end = rest[1..]
        .find("<g class=\"scenario\"")
        .map_or(rest.len(), |i| i + 1);
    &rest[..end]
}

/// Every tag closes in order, attributes are quoted, `&` starts an entity,
/// and no character is one XML 1.0 forbids (a control character but tab,
/// LF and CR, U+FFFE, U+FFFF), which no escaping makes allowed.
fn check_well_formed(xml: &str) {
    let forbidden: Vec<char> = xml
        .chars()
        .filter(|&c| {
            (c < ' ' && !matches!(c, '\t' | '\n' | '\r')) || matches!(c, '\u{fffe}' | '\u{ffff}')
        })
        .collect();
    assert!(forbidden.is_empty(), "forbidden characters: {forbidden:?}");
    let mut open: Vec<&str> = Vec::new();
    let mut rest = xml;
    let mut roots = 0;
    while let Some(lt) = rest.find('<') {
        let text = &rest[..lt];
        for (i, _) in text.match_indices('&') {
            let entity = &text[i..];
            assert!(
                ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                    .iter()
                    .any(|e| entity.starts_with(e)),
                "bare & in {text:?}"
            );
        }
        let gt = rest[lt..].find('>').expect("unclosed tag") + lt;
        let tag = &rest[lt + 1..gt];
        rest = &rest[gt + 1..];
        assert_eq!(
            tag.matches('"').count() % 2,
            0,
            "unbalanced quotes in <{tag}>"
        );
        assert!(!tag.contains('<'), "< inside <{tag}>");
        if tag.starts_with('?') {
            assert!(tag.ends_with('?'));
        } else if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(open.pop(), Some(name.trim()), "mismatched </{name}>");
        } else {
            let name = tag.split_whitespace().next().unwrap().trim_end_matches('/');
            if open.is_empty() {
                roots += 1;
            }
            if !tag.ends_with('/') {
                open.push(name);
            }
        }
    }
    assert!(open.is_empty(), "unclosed: {open:?}");
    assert_eq!(roots, 1, "one root element");
    assert!(rest.trim().is_empty());
}
