"""The Prometheus exposition read back into samples."""

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample by name and sorted labels, as prometheus_client's parser reads them."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(found: dict, name: str, **labels: str) -> float:  # type: ignore[type-arg]
    return found.get((name, tuple(sorted(labels.items()))), 0.0)
