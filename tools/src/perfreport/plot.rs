//! SVG plots (plotters, SVG backend): latency percentiles against offered load, and the latency
//! spectrum by percentile at one load.

use plotters::prelude::*;

use super::ReportError;

/// Plot size, px.
pub const PLOT_SIZE_PX: (u32, u32) = (900, 520);

/// One line of a plot.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    pub label: String,
    /// Series index: picks the colour.
    pub colour: usize,
    pub points: Vec<(f64, f64)>,
}

/// Colours by series index: ricochet's three percentiles in blues, nginx's in reds.
const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(23, 190, 207),
    RGBColor(44, 60, 140),
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
    RGBColor(140, 20, 20),
];

fn plot_err(e: impl std::fmt::Display) -> ReportError {
    ReportError::Plot(e.to_string())
}

/// The bounds of every point, widened so a flat line still has a range.
fn bounds(lines: &[Line]) -> Option<((f64, f64), (f64, f64))> {
    let pts = lines.iter().flat_map(|l| l.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    let mut any = false;
    for &(x, y) in pts {
        if !(x.is_finite() && y.is_finite() && y > 0.0) {
            continue;
        }
        any = true;
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if !any {
        return None;
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    Some(((x0, x1), (y0 / 1.5, y1 * 1.5)))
}

/// Draws `lines` (y on a log scale) as an SVG document.
pub fn line_chart(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    lines: &[Line],
    x_label: &dyn Fn(&f64) -> String,
) -> Result<String, ReportError> {
    let ((x0, x1), (y0, y1)) = bounds(lines).ok_or_else(|| plot_err("no points to plot"))?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, PLOT_SIZE_PX).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(x0..x1, (y0..y1).log_scale())
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .x_label_formatter(x_label)
            .y_label_formatter(&|y| format_us(*y))
            .draw()
            .map_err(plot_err)?;
        for line in lines {
            let colour = PALETTE[line.colour % PALETTE.len()];
            let pts: Vec<(f64, f64)> = line
                .points
                .iter()
                .copied()
                .filter(|(x, y)| x.is_finite() && y.is_finite() && *y > 0.0)
                .collect();
            chart
                .draw_series(LineSeries::new(pts, colour.stroke_width(2)))
                .map_err(plot_err)?
                .label(line.label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(plot_err)?;
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}

/// A latency in µs for an axis label: `850µs`, `1.2ms`, `3s`.
pub fn format_us(us: f64) -> String {
    if us >= 1e6 {
        format!("{:.3}s", us / 1e6)
    } else if us >= 1e3 {
        format!("{:.3}ms", us / 1e3)
    } else {
        format!("{us:.0}µs")
    }
    .replace(".000", "")
}

/// A rate for an axis label: `5k`, `1.5M`.
pub fn format_rate(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2}M", r / 1e6)
    } else if r >= 1e3 {
        format!("{:.1}k", r / 1e3)
    } else {
        format!("{r:.0}")
    }
    .replace(".00M", "M")
    .replace(".0k", "k")
}

/// Percentile `p` (0..100) as "nines" for a log-like x axis: 90 → 1, 99 → 2, 99.9 → 3.
pub fn nines(p: f64) -> f64 {
    -(1.0 - p.min(99.9999) / 100.0).log10()
}

/// The inverse of [`nines`], as a label: 1 → `90`, 2 → `99`, 3 → `99.9`; empty between whole
/// nines (labels like `96.8377` say nothing).
pub fn nines_label(n: &f64) -> String {
    if (n - n.round()).abs() > 0.01 {
        return String::new();
    }
    let n = &n.round();
    if *n == 0.0 {
        return "0".to_string();
    }
    let p = 100.0 * (1.0 - 10f64.powf(-*n));
    let s = format!("{p:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_an_svg_with_labels() {
        let lines = vec![
            Line {
                label: "ricochet p99".into(),
                colour: 0,
                points: vec![(5000.0, 80.0), (20000.0, 120.0)],
            },
            Line {
                label: "nginx p99".into(),
                colour: 3,
                points: vec![(5000.0, 100.0), (20000.0, 400.0)],
            },
        ];
        let svg = line_chart("t", "x", "y", &lines, &|x| format_rate(*x)).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("ricochet p99") && svg.contains("nginx p99"));
        assert!(svg.contains("<polyline") || svg.contains("<path"));
        let empty = vec![Line {
            label: "none".into(),
            colour: 0,
            points: vec![],
        }];
        assert!(line_chart("t", "x", "y", &empty, &|x| format_rate(*x)).is_err());
    }

    #[test]
    fn label_formats() {
        assert_eq!(format_us(850.0), "850µs");
        assert_eq!(format_us(1200.0), "1.200ms");
        assert_eq!(format_us(1000.0), "1ms");
        assert_eq!(format_rate(5000.0), "5k");
        assert_eq!(format_rate(1_500_000.0), "1.50M");
        assert!((nines(99.0) - 2.0).abs() < 1e-9);
        assert_eq!(nines_label(&3.0), "99.9");
        assert_eq!(nines_label(&1.0), "90");
        assert_eq!(nines_label(&1.5), "");
        assert_eq!(nines_label(&0.0), "0");
    }
}
