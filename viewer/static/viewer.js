// Norn viewer: small progressive enhancements; every page works without it.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  // Forms that change something ask first. Delegated, so that forms a
  // refresh puts in the page ask too.
  document.addEventListener("submit", (ev) => {
    const form = ev.target;
    if (form instanceof HTMLFormElement && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
      ev.preventDefault();
    }
  });
  // "/" focuses the search box, as in many consoles.
  document.addEventListener("keydown", (ev) => {
    const box = document.getElementById("search-id");
    if (ev.key === "/" && box && document.activeElement !== box &&
        !["INPUT", "TEXTAREA"].includes(document.activeElement.tagName)) {
      ev.preventDefault();
      box.focus();
    }
  });
  autoRefresh();
});

// autoRefresh reloads the page's content every data-refresh seconds: it
// fetches the same address and swaps in its <main> and the header's
// counts, keeping the scroll position. It holds off while the user is at
// work on the page (typing in a form, a payload opened, text selected) or
// the tab is hidden; the header's button pauses it, and the choice is kept
// for the next pages.
function autoRefresh() {
  const main = document.querySelector("main[data-refresh]");
  const toggle = document.getElementById("refresh-toggle");
  if (!main || !toggle) {
    return;
  }
  const every = Math.max(1, Number(main.dataset.refresh) || 5) * 1000;
  const key = "norn-viewer-refresh-paused";
  let paused = window.localStorage.getItem(key) === "1";
  const show = () => {
    toggle.setAttribute("aria-pressed", paused ? "true" : "false");
    toggle.textContent = paused ? "refresh paused" : "pause refresh";
    toggle.title = paused ? "click to refresh this page every few seconds again" :
      "this page refreshes itself every few seconds; click to pause";
    document.body.dataset.refreshed = document.body.dataset.refreshed || "0";
  };
  toggle.addEventListener("click", () => {
    paused = !paused;
    window.localStorage.setItem(key, paused ? "1" : "0");
    show();
  });
  show();

  const busy = () => {
    const active = document.activeElement;
    if (active && main.contains(active) && ["INPUT", "TEXTAREA", "SELECT"].includes(active.tagName)) {
      return true;
    }
    for (const field of main.querySelectorAll("input, textarea")) {
      if (field.type !== "hidden" && field.type !== "checkbox" && field.value !== field.defaultValue) {
        return true;
      }
    }
    if (main.querySelector("details[open]")) {
      return true;
    }
    const sel = window.getSelection();
    return sel && !sel.isCollapsed;
  };

  let inFlight = false;
  const tick = async () => {
    if (paused || inFlight || document.hidden || busy()) {
      return;
    }
    inFlight = true;
    try {
      const resp = await fetch(window.location.href, {credentials: "same-origin", cache: "no-store"});
      if (!resp.ok || resp.redirected) {
        return; // an error page, or a login: leave the page as it is
      }
      const doc = new DOMParser().parseFromString(await resp.text(), "text/html");
      const next = doc.querySelector("main[data-refresh]");
      if (!next || paused || busy()) {
        return;
      }
      const x = window.scrollX, y = window.scrollY;
      main.replaceChildren(...Array.from(next.childNodes, (n) => document.importNode(n, true)));
      const counts = document.getElementById("header-counts");
      const nextCounts = doc.getElementById("header-counts");
      if (counts && nextCounts) {
        counts.replaceChildren(...Array.from(nextCounts.childNodes, (n) => document.importNode(n, true)));
      }
      window.scrollTo(x, y);
      document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed) + 1);
    } catch (err) {
      // The viewer may be restarting: try again at the next tick.
    } finally {
      inFlight = false;
    }
  };
  window.setInterval(tick, every);
}
