// semdup review page: keyboard shortcuts and verdict buttons (no framework, no build step).
// j / k move between pairs, d records "duplicate", n "not a duplicate", s skips. Verdicts go to
// POST /review/api/verdicts with the session's CSRF token; the page never inserts HTML, only text.
(function () {
  "use strict";
  var meta = document.querySelector('meta[name="csrf-token"]');
  var token = meta ? meta.getAttribute("content") : "";
  var pairs = Array.prototype.slice.call(document.querySelectorAll("article.pair"));
  var status = document.getElementById("status");
  var LABELS = { duplicate: "duplicate", not_duplicate: "not a duplicate" };
  var current = -1;

  function say(text) {
    if (status) { status.textContent = text; }
  }

  function focusPair(i) {
    if (!pairs.length) { return; }
    i = Math.max(0, Math.min(pairs.length - 1, i));
    if (current >= 0 && pairs[current]) { pairs[current].classList.remove("current"); }
    current = i;
    var el = pairs[i];
    el.classList.add("current");
    el.focus({ preventScroll: true });
    el.scrollIntoView({ block: "nearest" });
  }

  function judge(i, verdict) {
    var el = pairs[i];
    if (!el || el.classList.contains("busy")) { return; }
    el.classList.add("busy");
    el.classList.remove("failed");
    fetch("/review/api/verdicts", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": token },
      body: JSON.stringify({
        index: el.dataset.index,
        post_id: el.dataset.post,
        candidate_id: el.dataset.candidate,
        verdict: verdict
      })
    }).then(function (resp) {
      return resp.json().catch(function () { return {}; }).then(function (data) {
        el.classList.remove("busy");
        if (!resp.ok) {
          el.classList.add("failed");
          var why = data && data.error && data.error.message ? data.error.message : "HTTP " + resp.status;
          say("Not recorded: " + why);
          return;
        }
        var stored = data.verdict.verdict;
        el.dataset.verdict = stored;
        el.querySelector(".mine").textContent = LABELS[stored] || stored;
        say("Recorded: post " + el.dataset.post + " / " + el.dataset.candidate + " is " + (LABELS[stored] || stored) +
            (data.changed ? "." : " (unchanged)."));
        if (i === current) { focusPair(i + 1); }
      });
    }).catch(function (err) {
      el.classList.remove("busy");
      el.classList.add("failed");
      say("Not recorded: " + err);
    });
  }

  pairs.forEach(function (el, i) {
    el.addEventListener("click", function (event) {
      var button = event.target.closest("button");
      if (!button) { focusPair(i); return; }
      focusPair(i);
      if (button.dataset.action === "skip") { focusPair(i + 1); return; }
      if (button.dataset.verdict) { judge(i, button.dataset.verdict); }
    });
  });

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) { return; }
    var target = event.target;
    if (target && target.closest && target.closest("input, select, textarea")) { return; }
    switch (event.key) {
      case "j": focusPair(current + 1); break;
      case "k": focusPair(current - 1); break;
      case "s": focusPair(current + 1); break;
      case "d": if (current < 0) { focusPair(0); } judge(current, "duplicate"); break;
      case "n": if (current < 0) { focusPair(0); } judge(current, "not_duplicate"); break;
      default: return;
    }
    event.preventDefault();
  });

  if (pairs.length) { focusPair(0); }
  document.documentElement.dataset.ready = "1";
})();
