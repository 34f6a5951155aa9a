//! Recall/QPS curves as SVG (plotters' SVG backend: text is left to the viewer, so no font
//! library is linked).

use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;

/// One curve: (recall, QPS, label) per point, in sweep order.
pub struct Series {
    /// Legend name.
    pub name: String,
    /// The points.
    pub points: Vec<(f64, f64, String)>,
}

const COLORS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
];

/// Draws QPS (log scale) against recall, the ann-benchmarks chart, into `path`.
pub fn recall_qps(
    path: &Path,
    title: &str,
    x_label: &str,
    series: &[Series],
) -> anyhow::Result<()> {
    let all = series.iter().flat_map(|s| s.points.iter());
    let (mut x_min, mut y_min, mut y_max) = (1.0f64, f64::MAX, 0.0f64);
    for (recall, qps, _) in all {
        x_min = x_min.min(*recall);
        y_min = y_min.min(*qps);
        y_max = y_max.max(*qps);
    }
    anyhow::ensure!(y_max > 0.0, "nothing to plot");
    let x_min = (x_min - 0.02).clamp(0.0, 0.99);
    let (y_min, y_max) = (y_min.max(1e-3) / 1.5, y_max * 1.5);

    let root = SVGBackend::new(path, (800, 560)).into_drawing_area();
    root.fill(&WHITE).context("svg")?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        // A little room right of recall = 1 so the labels of the last points fit.
        .build_cartesian_2d(
            x_min..1.0 + (1.0 - x_min) * 0.12,
            (y_min..y_max).log_scale(),
        )
        .context("svg chart")?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc("queries per second (log)")
        .y_labels(12)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .x_label_formatter(&|v| {
            if *v <= 1.0 {
                format!("{v:.2}")
            } else {
                String::new()
            }
        })
        .draw()
        .context("svg mesh")?;
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                s.points.iter().map(|(x, y, _)| (*x, *y)),
                color.stroke_width(2),
            ))
            .context("svg line")?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(s.points.iter().map(|(x, y, label)| {
                EmptyElement::at((*x, *y))
                    + Circle::new((0, 0), 4, color.filled())
                    // Log axes label only powers of ten: print each point's QPS beside it.
                    + Text::new(format!("{label} ({y:.0}/s)"), (6, -14), ("sans-serif", 12))
            }))
            .context("svg points")?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .context("svg legend")?;
    root.present()
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
