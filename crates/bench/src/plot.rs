//! The seeds' plots, drawn with plotters as SVG and PNG: backup size against backup time per codec
//! (peers included), throughput against stripes, transfer size and buffer count, and CPU % per
//! codec. Text needs a TrueType font: the system's DejaVu Sans or Liberation Sans, or `SHEAF_FONT`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use sheaf_core::size::format_size;
use sheaf_core::{Error, ErrorKind, Result};

use crate::lab::LabRow;
use crate::results::Row;

/// Okabe–Ito (distinguishable by most colour-blind readers), with grey for its yellow, which is
/// too faint on white.
const COLORS: [(u8, u8, u8); 8] = [(0, 114, 178), (230, 159, 0), (0, 158, 115), (204, 121, 167), (86, 180, 233), (213, 94, 0), (0, 0, 0), (120, 120, 120)];

fn color(i: usize) -> RGBColor {
    let (r, g, b) = COLORS[i % COLORS.len()];
    RGBColor(r, g, b)
}

const FONT_PATHS: [&str; 6] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

/// Register a sans-serif font with plotters, once.
fn font() -> Result<()> {
    static FONT: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let candidates: Vec<PathBuf> = std::env::var_os("SHEAF_FONT").map(PathBuf::from).into_iter().chain(FONT_PATHS.iter().map(PathBuf::from)).collect();
        let path = candidates
            .iter()
            .find(|p| p.is_file())
            .ok_or_else(|| "no TrueType font for the plots' text: install one (Debian: apt-get install fonts-dejavu-core) or set SHEAF_FONT=/path/to/font.ttf".to_string())?;
        let bytes = std::fs::read(path).map_err(|e| format!("cannot read font {}: {e}", path.display()))?;
        // plotters keeps fonts for the life of the process.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).map_err(|_| format!("{} is not a TrueType font (SHEAF_FONT?)", path.display()))
    })
    .clone()
    .map_err(|e| Error::new(ErrorKind::InvalidInput, e))
}

/// A series of points: one codec, or one peer.
struct Series {
    name: String,
    points: Vec<(f64, f64)>,
    /// Colour index (one per codec or peer).
    color: usize,
    /// Marker: 0 circle, 1 triangle, 2 square, 3 cross (one per target, or peers apart).
    marker: usize,
}

/// Width of the legend panel at the right of an x–y chart.
const LEGEND_WIDTH: u32 = 270;

/// Draw marker `m` at backend coordinates `p` (legend panel).
fn legend_mark<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, m: usize, p: (i32, i32), c: RGBColor) -> std::result::Result<(), String> {
    let style = c.filled();
    match m % 4 {
        0 => area.draw(&Circle::new(p, 5, style)),
        1 => area.draw(&TriangleMarker::new(p, 7, style)),
        2 => area.draw(&Rectangle::new([(p.0 - 5, p.1 - 5), (p.0 + 5, p.1 + 5)], style)),
        _ => area.draw(&Cross::new(p, 5, c.stroke_width(2))),
    }
    .map_err(de)
}

/// An x–y chart.
struct XyChart {
    file: &'static str,
    title: String,
    x_label: String,
    y_label: String,
    lines: bool,
    /// x axis from zero (else padded around the data).
    x_from_zero: bool,
    x_format: Box<dyn Fn(f64) -> String>,
    /// How many x labels at most (few for a discrete knob, so that ticks fall on its values).
    x_labels: usize,
    series: Vec<Series>,
}

/// A grouped bar chart: categories, and two values per category.
struct Bars {
    file: &'static str,
    title: String,
    y_label: String,
    categories: Vec<String>,
    groups: [(String, Vec<f64>); 2],
}

fn de<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

fn span(values: impl Iterator<Item = f64> + Clone, from_zero: bool) -> (f64, f64) {
    let lo = values.clone().fold(f64::INFINITY, f64::min);
    let hi = values.fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if from_zero {
        return (0.0, if hi > 0.0 { hi * 1.15 } else { 1.0 });
    }
    let pad = if hi > lo { (hi - lo) * 0.08 } else { 0.5 };
    (lo - pad, hi + pad)
}

fn draw_xy<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, c: &XyChart) -> std::result::Result<(), String> {
    root.fill(&WHITE).map_err(de)?;
    let root = root.margin(10, 0, 0, 0).titled(&c.title, ("sans-serif", 22)).map_err(de)?;
    let (plot, legend) = root.split_horizontally(SIZE.0 - LEGEND_WIDTH);
    let xs = c.series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = c.series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let (x0, x1) = span(xs, c.x_from_zero);
    let (y0, y1) = span(ys, true);
    let mut chart = ChartBuilder::on(&plot).margin(18).x_label_area_size(48).y_label_area_size(72).build_cartesian_2d(x0..x1, y0..y1).map_err(de)?;
    let fmt = &c.x_format;
    chart
        .configure_mesh()
        .x_desc(c.x_label.as_str())
        .y_desc(c.y_label.as_str())
        .x_label_formatter(&|v| fmt(*v))
        .y_label_formatter(&|v| plain(*v))
        .x_labels(c.x_labels)
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(de)?;
    for s in &c.series {
        let col = color(s.color);
        let mut pts = s.points.clone();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        if c.lines && pts.len() > 1 {
            chart.draw_series(LineSeries::new(pts.clone(), col.stroke_width(2))).map_err(de)?;
        }
        let style = col.filled();
        match s.marker % 4 {
            0 => chart.draw_series(pts.iter().map(|&p| Circle::new(p, 5, style))).map(drop),
            1 => chart.draw_series(pts.iter().map(|&p| TriangleMarker::new(p, 7, style))).map(drop),
            2 => chart.draw_series(pts.iter().map(|&p| EmptyElement::at(p) + Rectangle::new([(-5, -5), (5, 5)], style))).map(drop),
            _ => chart.draw_series(pts.iter().map(|&p| Cross::new(p, 5, col.stroke_width(2)))).map(drop),
        }
        .map_err(de)?;
    }
    // The legend has a panel of its own, so that it never hides a point.
    for (i, s) in c.series.iter().enumerate() {
        let y = 40 + 24 * i as i32;
        legend_mark(&legend, s.marker, (14, y), color(s.color))?;
        legend.draw_text(&s.name, &("sans-serif", 14).into_font().color(&BLACK), (30, y - 8)).map_err(de)?;
    }
    root.present().map_err(de)
}

fn draw_bars<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, c: &Bars) -> std::result::Result<(), String> {
    root.fill(&WHITE).map_err(de)?;
    // A segmented range includes its end: n categories are 0..n-1.
    let n = c.categories.len().max(1) as i32;
    let (_, y1) = span(c.groups.iter().flat_map(|g| g.1.iter().copied()), true);
    let y1 = y1 * 1.2;
    let mut chart = ChartBuilder::on(&root)
        .caption(&c.title, ("sans-serif", 22))
        .margin(18)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d((0..n - 1).into_segmented(), 0.0..y1)
        .map_err(de)?;
    let names = &c.categories;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc("codec")
        .y_desc(c.y_label.as_str())
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => names.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .y_label_formatter(&|v| plain(*v))
        .light_line_style(WHITE.mix(0.0))
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .draw()
        .map_err(de)?;
    for (g, (name, values)) in c.groups.iter().enumerate() {
        let col = color(g);
        chart
            .draw_series(values.iter().enumerate().map(|(i, &v)| {
                let i = i as i32;
                let (a, b) = if g == 0 { (SegmentValue::Exact(i), SegmentValue::CenterOf(i)) } else { (SegmentValue::CenterOf(i), SegmentValue::Exact(i + 1)) };
                let mut r = Rectangle::new([(a, 0.0), (b, v)], col.filled());
                r.set_margin(0, 0, if g == 0 { 8 } else { 1 }, if g == 0 { 1 } else { 8 });
                r
            }))
            .map_err(de)?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], col.filled()));
    }
    chart
        .configure_series_labels()
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(de)?;
    root.present().map_err(de)
}

const SIZE: (u32, u32) = (1000, 620);

/// A chart that draws itself on any plotters backend.
trait Chart {
    fn file(&self) -> &'static str;
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> std::result::Result<(), String>;
}

impl Chart for XyChart {
    fn file(&self) -> &'static str {
        self.file
    }
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> std::result::Result<(), String> {
        draw_xy(root, self)
    }
}

impl Chart for Bars {
    fn file(&self) -> &'static str {
        self.file
    }
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> std::result::Result<(), String> {
        draw_bars(root, self)
    }
}

/// Draw `c` into `dir` as SVG and PNG; returns the files.
fn render(dir: &Path, c: &impl Chart) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for ext in ["svg", "png"] {
        let path = dir.join(format!("{}.{ext}", c.file()));
        let drawn = if ext == "svg" { c.draw(SVGBackend::new(&path, SIZE).into_drawing_area()) } else { c.draw(BitMapBackend::new(&path, SIZE).into_drawing_area()) };
        drawn.map_err(|e| Error::new(ErrorKind::Target, format!("cannot draw {}: {e}", path.display())))?;
        out.push(path);
    }
    Ok(out)
}

/// A tick value without trailing zeros: 0.02, 2.5, 40.
fn plain(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

/// An integer knob's tick: its value, or nothing between values.
fn integer(v: f64) -> String {
    if (v - v.round()).abs() < 1e-6 {
        format!("{v:.0}")
    } else {
        String::new()
    }
}

/// Lines of sheaf throughput against one knob, the other knobs held at the first row's values.
/// The knob's values are evenly spaced (its distinct values in order: 1, 2, 4, 8 stripes or 64 KiB,
/// 1 MiB, 4 MiB read like a log axis) and labelled by `label`.
fn knob_chart(rows: &[Row], file: &'static str, knob: &str, x_label: &str, x: fn(&Row) -> Option<f64>, same: fn(&Row, &Row) -> bool, label: fn(f64) -> String) -> XyChart {
    let sheaf: Vec<&Row> = rows.iter().filter(|r| r.setting.tool == "sheaf").collect();
    let base = sheaf.first().copied();
    let mut targets: Vec<&str> = sheaf.iter().map(|r| r.setting.target.as_str()).collect();
    targets.sort_unstable();
    targets.dedup();
    let chosen: Vec<&Row> = sheaf.iter().copied().filter(|r| base.is_some_and(|b| same(r, b))).collect();
    let mut values: Vec<f64> = chosen.iter().filter_map(|r| x(r)).collect();
    values.sort_by(f64::total_cmp);
    values.dedup();
    let mut codecs: Vec<&str> = Vec::new();
    let mut series: Vec<Series> = Vec::new();
    for r in chosen {
        let name = if targets.len() > 1 { format!("{} -> {}", r.setting.compression, r.setting.target) } else { r.setting.compression.clone() };
        let Some(index) = x(r).and_then(|v| values.iter().position(|&u| u == v)) else { continue };
        let p = (index as f64, r.backup_mb_per_s());
        if !codecs.contains(&r.setting.compression.as_str()) {
            codecs.push(&r.setting.compression);
        }
        let color = codecs.iter().position(|c| *c == r.setting.compression).unwrap_or(0);
        let marker = targets.iter().position(|t| *t == r.setting.target).unwrap_or(0);
        match series.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push(p),
            None => series.push(Series { name, points: vec![p], color, marker }),
        }
    }
    // Group the legend by target, then codec.
    series.sort_by_key(|s| (s.marker, s.color));
    let held = base.map(|b| match knob {
        "stripes" => format!("transfer {}, buffers {}", format_size(b.setting.transfer_size), buffers(b)),
        "transfer size" => format!("{} stripe(s), buffers {}", b.setting.stripes, buffers(b)),
        _ => format!("{} stripe(s), transfer {}", b.setting.stripes, format_size(b.setting.transfer_size)),
    });
    let n = values.len();
    XyChart {
        file,
        title: format!("sheaf backup throughput vs {knob} ({})", held.unwrap_or_default()),
        x_label: x_label.into(),
        y_label: "backup throughput (MB/s, median)".into(),
        lines: true,
        x_from_zero: false,
        x_format: Box::new(move |v| {
            let i = v.round();
            if (v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < n {
                label(values[i as usize])
            } else {
                String::new()
            }
        }),
        x_labels: n + 1,
        series,
    }
}

fn buffers(r: &Row) -> String {
    r.setting.buffer_count.map_or_else(|| "default".to_string(), |b| b.to_string())
}

/// `sheaf lab`'s plots into `dir`:
/// - `lab-cost`: each codec's cost per access against the ratio it buys, as log10 of the multiple
///   of raw (circle: scan, triangle: fetch, square: update; one colour per codec, a point per unit);
/// - `lab-fetch`: single-page fetch latency against the unit size, a line per codec.
///
/// # Errors
/// No font for the text, or a file that cannot be written.
pub fn write_lab_plots(rows: &[LabRow], dir: &Path) -> Result<Vec<PathBuf>> {
    font()?;
    let mut codecs: Vec<&str> = Vec::new();
    for r in rows.iter().filter(|r| r.codec != "none") {
        if !codecs.contains(&r.codec.as_str()) {
            codecs.push(&r.codec);
        }
    }
    let mut units: Vec<usize> = rows.iter().filter(|r| r.codec != "none").map(|r| r.unit).collect();
    units.sort_unstable();
    units.dedup();
    let mut cost = Vec::new();
    for (ci, c) in codecs.iter().enumerate() {
        for (m, what, pick) in [(0, "scan", (|r: &LabRow| r.scan_x) as fn(&LabRow) -> f64), (1, "fetch", |r| r.fetch_x), (2, "update", |r| r.update_x)] {
            let points = rows.iter().filter(|r| r.codec == *c).map(|r| (r.ratio, pick(r).max(1e-3).log10())).collect();
            cost.push(Series { name: format!("{c} {what}"), points, color: ci, marker: m });
        }
    }
    let mut files = render(
        dir,
        &XyChart {
            file: "lab-cost",
            title: "What a codec costs per access, against the ratio it buys".into(),
            x_label: "compression ratio".into(),
            y_label: "cost, log10 of the multiple of raw".into(),
            lines: false,
            x_from_zero: false,
            x_format: Box::new(plain),
            x_labels: 8,
            series: cost,
        },
    )?;
    let fetch = codecs
        .iter()
        .enumerate()
        .map(|(ci, c)| Series {
            name: c.to_string(),
            points: rows.iter().filter(|r| r.codec == *c).filter_map(|r| units.iter().position(|&u| u == r.unit).map(|i| (i as f64, r.fetch_p50_us))).collect(),
            color: ci,
            marker: 0,
        })
        .collect();
    let labels: Vec<String> = units.iter().map(|&u| format_size(u as u64)).collect();
    files.extend(render(
        dir,
        &XyChart {
            file: "lab-fetch",
            title: "Single-page fetch latency against the unit compressed".into(),
            x_label: "unit".into(),
            y_label: "fetch p50, µs".into(),
            lines: true,
            x_from_zero: true,
            x_format: Box::new(move |v| if (v - v.round()).abs() < 1e-6 { labels.get(v.round() as usize).cloned().unwrap_or_default() } else { String::new() }),
            x_labels: units.len().max(2),
            series: fetch,
        },
    )?);
    Ok(files)
}

/// Draw every plot of `rows` into `dir` as SVG and PNG; returns the files written.
///
/// # Errors
/// No font for the text, or a file that cannot be written.
pub fn write_plots(rows: &[Row], dir: &Path) -> Result<Vec<PathBuf>> {
    font()?;
    let mut files = Vec::new();
    let repeats = rows.first().map_or(0, |r| r.backup_seconds.n);

    // Size against time: sheaf per codec, each peer as one series.
    // Peers write to disk: so do the sheaf points beside them, when there are any.
    let to_disk = rows.iter().any(|r| r.setting.tool == "sheaf" && r.setting.target != "nul");
    let mut series: Vec<Series> = Vec::new();
    for r in rows.iter().filter(|r| !to_disk || r.setting.target != "nul") {
        let peer = r.setting.tool != "sheaf";
        let mut name = if peer { r.setting.tool.clone() } else { format!("sheaf {}", r.setting.compression) };
        if r.setting.backup_type != "full" {
            name = format!("{name} ({})", r.setting.backup_type);
        }
        let p = (r.backup_seconds.median, r.size_bytes.median / 1e6);
        let next = series.len();
        match series.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push(p),
            // sheaf's codecs as circles, each peer a marker of its own.
            None => series.push(Series { name, points: vec![p], color: next, marker: if peer { 1 + series.iter().filter(|s| s.marker > 0).count() } else { 0 } }),
        }
    }
    files.extend(render(
        dir,
        &XyChart {
            file: "size_vs_backup_time",
            title: format!("Backup size vs backup time{} (median of {repeats}; lower left is better)", if to_disk { ", to disk" } else { ", to nul" }),
            x_label: "backup time (s)".into(),
            y_label: "backup size (MB)".into(),
            lines: false,
            x_from_zero: true,
            x_format: Box::new(plain),
            x_labels: 10,
            series,
        },
    )?);

    // The knobs and the CPU per codec are of full backups (an incremental's cost is the change's).
    let full: Vec<Row> = rows.iter().filter(|r| r.setting.backup_type == "full").cloned().collect();
    let rows = full.as_slice();
    files.extend(render(
        dir,
        &knob_chart(
            rows,
            "throughput_vs_stripes",
            "stripes",
            "stripes (files written in parallel)",
            |r| Some(r.setting.stripes as f64),
            |r, b| r.setting.transfer_size == b.setting.transfer_size && r.setting.buffer_count == b.setting.buffer_count,
            integer,
        ),
    )?);
    files.extend(render(
        dir,
        &knob_chart(
            rows,
            "throughput_vs_transfer_size",
            "transfer size",
            "transfer size (MAXTRANSFERSIZE)",
            |r| (r.setting.transfer_size > 0).then_some(r.setting.transfer_size as f64),
            |r, b| r.setting.stripes == b.setting.stripes && r.setting.buffer_count == b.setting.buffer_count,
            |v| format_size(v as u64),
        ),
    )?);
    files.extend(render(
        dir,
        &knob_chart(
            rows,
            "throughput_vs_buffer_count",
            "buffer count",
            "buffers in flight (BUFFERCOUNT; the default as resolved)",
            |r| r.buffers_used.or(r.setting.buffer_count).map(|b| b as f64),
            |r, b| r.setting.stripes == b.setting.stripes && r.setting.transfer_size == b.setting.transfer_size,
            integer,
        ),
    )?);

    // CPU per codec: sheaf at the first settings, to the first disk target if there is one.
    let sheaf: Vec<&Row> = rows.iter().filter(|r| r.setting.tool == "sheaf").collect();
    let chosen: Vec<&Row> = match sheaf.iter().find(|r| r.restore_seconds.is_some()).or(sheaf.first()) {
        Some(b) => sheaf
            .iter()
            .copied()
            .filter(|r| {
                r.setting.target == b.setting.target
                    && r.setting.stripes == b.setting.stripes
                    && r.setting.transfer_size == b.setting.transfer_size
                    && r.setting.buffer_count == b.setting.buffer_count
            })
            .collect(),
        None => Vec::new(),
    };
    let cores = "of all cores";
    files.extend(render(
        dir,
        &Bars {
            file: "cpu_per_codec",
            title: format!(
                "sheaf CPU per codec ({})",
                chosen.first().map_or_else(String::new, |b| format!("{} stripe(s) -> {}, median of {repeats}", b.setting.stripes, b.setting.target))
            ),
            y_label: format!("CPU % {cores} (user + system)"),
            categories: chosen.iter().map(|r| r.setting.compression.clone()).collect(),
            groups: [
                ("backup".into(), chosen.iter().map(|r| r.backup_cpu_pct.median).collect()),
                ("restore".into(), chosen.iter().map(|r| r.restore_cpu_pct.map_or(0.0, |s| s.median)).collect()),
            ],
        },
    )?);
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Setting;
    use crate::stats::summarize;

    fn row(tool: &str, codec: &str, stripes: usize, ts: u64, secs: f64, size: f64, target: &str) -> Row {
        let s = |v: f64| summarize(&[v, v * 1.1, v * 0.9]).unwrap();
        Row {
            setting: Setting {
                tool: tool.into(),
                compression: codec.into(),
                settings: String::new(),
                stripes,
                transfer_size: ts,
                buffer_count: None,
                target: target.into(),
                backup_type: "full".into(),
            },
            buffers_used: Some(10),
            backup_seconds: s(secs),
            backup_cpu_pct: s(80.0),
            backup_host_cpu_pct: s(85.0),
            backup_peak_rss_bytes: s(20e6),
            size_bytes: s(size),
            bytes_read: 1_000_000_000,
            verify_seconds: None,
            restore_seconds: (target != "nul").then(|| s(secs * 1.5)),
            restore_cpu_pct: (target != "nul").then(|| s(40.0)),
            restore_host_cpu_pct: None,
            restore_peak_rss_bytes: None,
            delta_restore_seconds: None,
            consolidate_seconds: None,
        }
    }

    #[test]
    fn every_plot_is_written_in_both_formats() {
        let mut rows = Vec::new();
        for target in ["nul", "/tmp/x"] {
            for stripes in [1, 2] {
                for ts in [65536, 1 << 20] {
                    for (codec, secs, size) in [("lz4", 1.5, 600e6), ("zstd:low", 2.5, 450e6)] {
                        rows.push(row("sheaf", codec, stripes, ts, secs / stripes as f64, size, target));
                    }
                }
            }
        }
        rows.push(row("pgbackrest", "zstd:low", 1, 0, 6.0, 451e6, "/tmp/x"));
        let dir = tempfile::tempdir().unwrap();
        let files = write_plots(&rows, dir.path()).unwrap();
        assert_eq!(files.len(), 10);
        for f in &files {
            let len = std::fs::metadata(f).unwrap().len();
            assert!(len > 3000, "{} is {len} bytes", f.display());
        }
        let svg = std::fs::read_to_string(dir.path().join("cpu_per_codec.svg")).unwrap();
        for text in ["backup", "restore", "lz4", "zstd:low", "CPU % of all cores"] {
            assert!(svg.contains(text), "the CPU plot lacks '{text}'");
        }
        assert!(svg.matches("<rect").count() >= 4, "two bars per codec");
        let svg = std::fs::read_to_string(dir.path().join("size_vs_backup_time.svg")).unwrap();
        for text in ["backup time (s)", "backup size (MB)", "sheaf lz4", "pgbackrest", "Backup size vs backup time, to disk"] {
            assert!(svg.contains(text), "the size plot lacks '{text}'");
        }
        let svg = std::fs::read_to_string(dir.path().join("throughput_vs_transfer_size.svg")).unwrap();
        assert!(svg.contains("64 KiB") && svg.contains("1 MiB"), "transfer sizes label the x axis");
        assert!(svg.contains("lz4 -&gt; /tmp/x") || svg.contains("lz4 -> /tmp/x"), "one line per codec and target");
        let png = std::fs::read(dir.path().join("cpu_per_codec.png")).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    }

    #[test]
    fn ticks_are_labelled_plainly() {
        assert_eq!(plain(2.0), "2");
        assert_eq!(plain(0.02), "0.02");
        assert_eq!(plain(2.5), "2.5");
        assert_eq!(integer(7.0), "7");
        assert_eq!(integer(7.5), "");
    }
}
