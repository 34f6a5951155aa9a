//! Recall/QPS curves as SVG (plotters' SVG backend: text is left to the viewer, so no font
//! library is linked).

use std::path::{Path, PathBuf};

use anyhow::Context;
use plotters::prelude::*;

/// One curve: (recall, y, label) per point, in sweep order.
pub struct Series {
    /// Legend name.
    pub name: String,
    /// The points.
    pub points: Vec<(f64, f64, String)>,
}

impl Series {
    /// Adds a point to the curve called `name` in `all`, starting that curve if it is new;
    /// curves keep the order their first points arrived in.
    pub fn push(all: &mut Vec<Series>, name: &str, point: (f64, f64, String)) {
        match all.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push(point),
            None => all.push(Series {
                name: name.to_owned(),
                points: vec![point],
            }),
        }
    }
}

/// Options of `cairn-loadtest plot`.
#[derive(clap::Args)]
pub struct Args {
    /// CSV with a header naming at least `series`, `label`, `recall` and the y column; one
    /// curve per distinct `series`, points in file order. Rows with an empty y are skipped.
    #[arg(long)]
    csv: PathBuf,
    /// What to plot against recall.
    #[arg(long, value_enum, default_value = "qps")]
    y: YAxis,
    /// Chart title.
    #[arg(long)]
    title: String,
    /// x-axis label.
    #[arg(long, default_value = "recall@10")]
    x_label: String,
    /// Output SVG.
    #[arg(long)]
    out: PathBuf,
}

/// Reads the CSV and draws it.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.csv)
        .with_context(|| format!("cannot read {}", args.csv.display()))?;
    let series =
        parse_csv(&text, args.y.column()).with_context(|| format!("in {}", args.csv.display()))?;
    recall_curve(&args.out, &args.title, &args.x_label, args.y, &series)
}

fn parse_csv(text: &str, y_column: &str) -> anyhow::Result<Vec<Series>> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().context("empty CSV")?.split(',').collect();
    let column = |name: &str| {
        header
            .iter()
            .position(|h| h.trim() == name)
            .with_context(|| format!("no `{name}` column in the header"))
    };
    let (series_at, label_at, recall_at, y_at) = (
        column("series")?,
        column("label")?,
        column("recall")?,
        column(y_column)?,
    );
    let mut all = Vec::new();
    for (i, line) in lines.enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        let cell = |at: usize| {
            cells
                .get(at)
                .copied()
                .with_context(|| format!("line {} has too few cells", i + 2))
        };
        if cell(y_at)?.is_empty() {
            continue;
        }
        let recall: f64 = cell(recall_at)?
            .parse()
            .with_context(|| format!("line {}: bad recall", i + 2))?;
        let y: f64 = cell(y_at)?
            .parse()
            .with_context(|| format!("line {}: bad {y_column}", i + 2))?;
        Series::push(
            &mut all,
            cell(series_at)?,
            (recall, y, cell(label_at)?.to_owned()),
        );
    }
    anyhow::ensure!(!all.is_empty(), "no rows with a `{y_column}` value");
    Ok(all)
}

/// What the (log-scale) y axis shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum YAxis {
    /// Queries per second: higher is better.
    Qps,
    /// Mean distance computations per query: lower is better (work, not time).
    DistanceComputations,
}

impl YAxis {
    /// The CSV column holding this value.
    fn column(self) -> &'static str {
        match self {
            YAxis::Qps => "qps",
            YAxis::DistanceComputations => "distance_computations",
        }
    }

    fn label(self) -> &'static str {
        match self {
            YAxis::Qps => "queries per second (log)",
            YAxis::DistanceComputations => "distance computations per query (log)",
        }
    }

    fn point_suffix(self) -> &'static str {
        match self {
            YAxis::Qps => "/s",
            YAxis::DistanceComputations => "",
        }
    }
}

const COLORS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
];

/// Draws `y` (log scale) against recall, the ann-benchmarks chart, into `path`.
pub fn recall_curve(
    path: &Path,
    title: &str,
    x_label: &str,
    y: YAxis,
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
        .y_desc(y.label())
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
    let suffix = y.point_suffix();
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
                    // Log axes label only powers of ten: print each point's value beside it.
                    + Text::new(
                        format!("{label} ({y:.0}{suffix})"),
                        (6, -14),
                        ("sans-serif", 12),
                    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_rows_become_curves_in_file_order() {
        let csv = "series,label,recall,qps,distance_computations\n\
                   a,ef=10,0.9,100,50\n\
                   b,ef=10,0.8,300,\n\
                   a,ef=20,0.95,80,70\n";
        let by_distance = parse_csv(csv, "distance_computations").unwrap();
        assert_eq!(by_distance.len(), 1, "b has no distance count");
        assert_eq!(by_distance[0].points.len(), 2);
        let by_qps = parse_csv(csv, "qps").unwrap();
        assert_eq!(
            by_qps.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(by_qps[0].points[1], (0.95, 80.0, "ef=20".to_owned()));
        assert!(parse_csv("series,recall\n", "qps").is_err());
        assert!(parse_csv("series,label,recall,qps\na,x,oops,1\n", "qps").is_err());
    }
}
