//! `--report FILE.html`: one self-contained page (inline SVG drawn by
//! plotters, inline CSS, no scripts, no network fetches) with the summary,
//! the latency percentile spectrum on a log scale, throughput and p99 per
//! timeline slot, and the find-max curve when there is one.

use plotters::prelude::*;

use crate::cli::Config;
use crate::ctx::Outcome;
use crate::findmax::Curve;
use crate::report::{fmt_ns, text};

const W: u32 = 860;
const H: u32 = 340;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

type Drawn = Result<(), Box<dyn std::error::Error>>;

fn line_chart(title: &str, x_desc: &str, y_desc: &str, pts: &[(f64, f64)], log_x: bool) -> String {
    let mut svg = String::new();
    let r: Drawn = (|| {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        root.fill(&WHITE)?;
        let xmax = pts.iter().map(|p| p.0).fold(1.0, f64::max);
        let ymax = pts.iter().map(|p| p.1).fold(0.0, f64::max).max(1e-3) * 1.1;
        let mut b = ChartBuilder::on(&root);
        b.caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70);
        if log_x {
            let mut c = b.build_cartesian_2d((1f64..xmax.max(10.0)).log_scale(), 0f64..ymax)?;
            c.configure_mesh()
                .x_desc(x_desc)
                .y_desc(y_desc)
                .x_label_formatter(&|v| {
                    let nines = v.log10();
                    if nines < 0.5 {
                        "0%".into()
                    } else {
                        format!("{}%", 100.0 - 100.0 / v)
                    }
                })
                .draw()?;
            c.draw_series(LineSeries::new(pts.iter().copied(), &BLUE))?;
        } else {
            let mut c = b.build_cartesian_2d(0f64..xmax.max(1.0), 0f64..ymax)?;
            c.configure_mesh().x_desc(x_desc).y_desc(y_desc).draw()?;
            c.draw_series(LineSeries::new(pts.iter().copied(), &BLUE))?;
            c.draw_series(pts.iter().map(|&p| Circle::new(p, 2, BLUE.filled())))?;
        }
        root.present()?;
        Ok(())
    })();
    match r {
        Ok(()) => svg,
        Err(e) => format!("<p>chart unavailable: {}</p>", escape(&e.to_string())),
    }
}

/// Builds the page. Cost: O(histogram buckets + timeline slots).
pub fn page(cfg: &Config, o: &Outcome, fm: Option<&Curve>) -> String {
    let st = &o.stats;
    let h = &st.hist_ns;
    // Spectrum: x = 1/(1-q), capped where the data ends.
    let mut spectrum = Vec::new();
    if !h.is_empty() {
        for v in h.iter_quantiles(2) {
            let q = v.quantile_iterated_to();
            if q >= 1.0 {
                break;
            }
            spectrum.push((1.0 / (1.0 - q), v.value_iterated_to() as f64 / 1e6));
        }
        let last = 1.0 / (1.0 - (1.0 - 1.0 / h.len() as f64).min(0.999_999));
        spectrum.push((last.max(1.0), h.max() as f64 / 1e6));
    }
    let slot_s = st.slot_ns as f64 / 1e9;
    let rps: Vec<(f64, f64)> = st
        .timeline
        .iter()
        .enumerate()
        .map(|(i, s)| ((i as f64 + 1.0) * slot_s, s.requests as f64 / slot_s))
        .collect();
    let p99: Vec<(f64, f64)> = st
        .timeline
        .iter()
        .enumerate()
        .filter(|(_, s)| s.requests > 0)
        .map(|(i, s)| {
            (
                (i as f64 + 1.0) * slot_s,
                s.hist_us.value_at_quantile(0.99) as f64 / 1e3,
            )
        })
        .collect();
    let mut body = String::new();
    body += &format!(
        "<h1>gapura-loadtest @ {}</h1>\n",
        escape(&cfg.targets[0].url())
    );
    body += &format!(
        "<pre>{}</pre>\n",
        escape(&text(cfg, o, fm.and_then(|c| c.max_rate).or(cfg.rate)))
    );
    body += &line_chart(
        "Latency by percentile",
        "percentile",
        "latency (ms)",
        &spectrum,
        true,
    );
    body += &line_chart("Throughput", "time (s)", "requests/s", &rps, false);
    body += &line_chart("p99 latency", "time (s)", "p99 (ms)", &p99, false);
    if let Some(c) = fm {
        let pts: Vec<(f64, f64)> = c
            .steps
            .iter()
            .map(|s| (s.rate, s.p99_ns as f64 / 1e6))
            .collect();
        let mut sorted = pts.clone();
        sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
        body += &line_chart(
            "find-max: p99 by offered rate",
            "rate (req/s)",
            "p99 (ms)",
            &sorted,
            false,
        );
        body += "<table><tr><th>rate</th><th>achieved</th><th>p99</th><th>error ratio</th><th>verdict</th></tr>\n";
        for s in &c.steps {
            body += &format!(
                "<tr><td>{:.1}</td><td>{:.1}</td><td>{}</td><td>{:.4}</td><td>{}</td></tr>\n",
                s.rate,
                s.achieved,
                fmt_ns(s.p99_ns as f64),
                s.error_ratio,
                if s.ok { "ok" } else { "over" }
            );
        }
        body += "</table>\n";
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>gapura-loadtest report</title>\n\
         <style>body{{font-family:sans-serif;max-width:900px;margin:2em auto;color:#222}}pre{{background:#f6f6f6;padding:1em;overflow-x:auto}}\
         svg{{display:block;margin:1em 0}}td,th{{padding:2px 10px;text-align:right}}</style></head>\n<body>\n{body}</body></html>\n"
    )
}
