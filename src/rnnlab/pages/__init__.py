"""The pages rnnlab writes, each built once as a ``page.Page`` from typed results: a study run's report
(``run``), a sweep's and a published map (``sweep``), a published study (``study``), the cell benchmark
(``bench``), the README's overview (``overview``); ``format`` writes the verdicts and numbers they share, and
``published`` keeps a published page as data."""
