// "Similar questions" while asking: calls GET /v1/similar as the title is typed.
// Debounced (one call once typing pauses for DEBOUNCE_MS), each new call aborts the one in flight, and an answer
// for a title that is no longer the one typed is dropped. Titles are shown as text (never as HTML).
(function () {
  "use strict";
  var DEBOUNCE_MS = 250;
  var MIN_CHARS = 3;
  var form = document.getElementById("ask");
  var key = document.getElementById("key");
  var index = document.getElementById("index");
  var title = document.getElementById("title");
  var list = document.getElementById("similar");
  var status = document.getElementById("status");
  var timer = null;
  var inFlight = null;
  var calls = 0;

  key.value = sessionStorage.getItem("semdup-key") || "";
  index.value = new URLSearchParams(location.search).get("index") || "";

  function show(items) {
    list.replaceChildren();
    items.forEach(function (post) {
      var li = document.createElement("li");
      var name = document.createElement(post.url ? "a" : "span");
      name.className = "title";
      name.textContent = post.title || "(post " + post.id + ")";
      if (post.url) { name.href = post.url; name.rel = "noopener noreferrer"; name.target = "_blank"; }
      var score = document.createElement("span");
      score.className = "score";
      score.textContent = post.score.toFixed(3);
      li.dataset.id = post.id;
      li.append(name, score);
      list.append(li);
    });
  }

  function search() {
    var text = title.value.trim();
    if (inFlight) { inFlight.abort(); inFlight = null; }
    if (text.length < MIN_CHARS) { show([]); status.textContent = ""; return; }
    var params = new URLSearchParams({ title: text, size: "5" });
    if (index.value.trim()) { params.set("index", index.value.trim()); }
    var controller = new AbortController();
    inFlight = controller;
    calls += 1;
    document.body.dataset.calls = String(calls);
    status.textContent = "searching...";
    fetch("/v1/similar?" + params.toString(), {
      headers: { "X-API-Key": key.value },
      signal: controller.signal,
    }).then(function (response) {
      return response.json().then(function (body) { return { ok: response.ok, body: body }; });
    }).then(function (answer) {
      if (title.value.trim() !== text) { return; }  // typed on since: a newer call is coming
      inFlight = null;
      if (!answer.ok) {
        show([]);
        status.textContent = (answer.body.error && answer.body.error.message) || "the search failed";
        return;
      }
      show(answer.body.similar);
      status.textContent = answer.body.similar.length ? "" : "no similar question yet";
      document.body.dataset.answered = text;
    }).catch(function (error) {
      if (error.name !== "AbortError") { status.textContent = "the service did not answer: " + error.message; }
    });
  }

  function later() {
    clearTimeout(timer);
    timer = setTimeout(search, DEBOUNCE_MS);
  }

  key.addEventListener("change", function () { sessionStorage.setItem("semdup-key", key.value); later(); });
  index.addEventListener("input", later);
  title.addEventListener("input", later);
  form.addEventListener("submit", function (event) { event.preventDefault(); search(); });
}());
