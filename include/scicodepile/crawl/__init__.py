"""The crawl: seed vocabulary -> validated search queries -> (query, window) partitions -> candidates."""
