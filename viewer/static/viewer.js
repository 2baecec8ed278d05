// Norn viewer: small progressive enhancements; every page works without it.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  // Forms that change something ask first.
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (ev) => {
      if (!window.confirm(form.dataset.confirm)) {
        ev.preventDefault();
      }
    });
  }
  // "/" focuses the search box, as in many consoles.
  document.addEventListener("keydown", (ev) => {
    const box = document.getElementById("search-id");
    if (ev.key === "/" && box && document.activeElement !== box &&
        !["INPUT", "TEXTAREA"].includes(document.activeElement.tagName)) {
      ev.preventDefault();
      box.focus();
    }
  });
});
