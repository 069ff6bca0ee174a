"""`swerollout view`: a batch and its trajectories in the browser.

- :mod:`.source` reads rollouts (a results file, or a batch through the client) into
  :class:`.model.ViewRecord` rows;
- :mod:`.tokens` decodes token ids one token at a time with the rollout's tokenizer;
- :mod:`.digest` turns records into the JSON the page draws (batch summary, rollout detail);
- :mod:`.page` assembles the HTML (every asset inlined or served by us, no CDN);
- :mod:`.server` serves it on loopback.

Model output is hostile input: the page puts data into the DOM only as text
(``textContent``), never as markup, and a Content-Security-Policy forbids any script
but ours.
"""
