"""The report's three files, written side by side into the output directory."""

MD_NAME, PNG_NAME, JSON_NAME = "benchmarks.md", "benchmarks.png", "benchmarks.json"
