//! Quickstart: create a collection, upsert points with payloads, query, query with a filter.
//!
//! Start a server (`make run` at the repository root), then:
//!
//! ```sh
//! cargo run --release -p cairn-client --example quickstart            # http://127.0.0.1:6333
//! CAIRN_URL=http://host:6333 cargo run --release -p cairn-client --example quickstart
//! ```
#![allow(clippy::print_stdout)]

use cairn_client::api::{Condition, Distance, Filter, Range};
use cairn_client::{
    Client, CountPoints, CreateCollectionBuilder, PayloadExt, Point, QueryPoints, UpsertPoints,
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct City {
    name: String,
    country: String,
    population: u32,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), cairn_client::Error> {
    let url = std::env::var("CAIRN_URL").unwrap_or_else(|_| "http://127.0.0.1:6333".into());
    let client = Client::new(url)?;
    let collection = "quickstart_cities";

    if client.collection_exists(collection).await? {
        client.delete_collection(collection).await?;
    }
    client
        .create_collection(CreateCollectionBuilder::new(
            collection,
            4,
            Distance::Cosine,
        ))
        .await?;

    let cities = [
        (1, [0.05, 0.61, 0.76, 0.74], "Berlin", "DE", 3_850_000),
        (2, [0.19, 0.81, 0.75, 0.11], "London", "GB", 8_980_000),
        (3, [0.36, 0.55, 0.47, 0.94], "Moscow", "RU", 12_600_000),
        (4, [0.18, 0.01, 0.85, 0.80], "New York", "US", 8_340_000),
        (5, [0.24, 0.18, 0.22, 0.44], "Beijing", "CN", 21_500_000),
        (6, [0.35, 0.08, 0.11, 0.44], "Munich", "DE", 1_510_000),
    ];
    let points = cities
        .iter()
        .map(|(id, vector, name, country, population)| {
            Point::new(*id as u64, vector.to_vec()).payload(&City {
                name: (*name).into(),
                country: (*country).into(),
                population: *population,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let written = client.upsert(UpsertPoints::new(collection, points)).await?;
    println!("upserted 6 cities (operation {})", written.operation_id);

    let query = vec![0.2, 0.1, 0.9, 0.7];
    let nearest = client
        .query(
            QueryPoints::new(collection)
                .vector(query.clone())
                .limit(3)
                .with_payload(true),
        )
        .await?;
    println!("nearest 3:");
    for hit in &nearest.points {
        let city: City = hit.payload_as()?;
        println!("  {:>2} {:.4} {}", hit.id, hit.score, city.name);
    }

    let german_big = Filter::must([
        Condition::matches("country", "DE"),
        Condition::range(
            "population",
            Range {
                gte: Some(2_000_000.0),
                ..Range::default()
            },
        ),
    ]);
    let filtered = client
        .query(
            QueryPoints::new(collection)
                .vector(query)
                .filter(german_big.clone())
                .limit(3)
                .with_payload(true)
                .explain(true),
        )
        .await?;
    println!("nearest German cities of 2M+:");
    for hit in &filtered.points {
        let city: City = hit.payload_as()?;
        println!("  {:>2} {:.4} {}", hit.id, hit.score, city.name);
    }
    if let Some(explain) = &filtered.explain {
        println!(
            "  (index {}, exact {}, {} distance computations)",
            explain.index, explain.exact, explain.distance_computations
        );
    }
    let count = client
        .count(CountPoints::new(collection).filter(german_big))
        .await?;
    println!("{count} city matches the filter");
    Ok(())
}
