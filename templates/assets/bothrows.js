/* bothrows: a chart drawn inside a hidden chip tab (or before the page's layout settled)
   has the wrong width; whenever a chart's box changes size (its tab is shown, by a click
   or by material linking the tabs of the page), size the plot to the box. */
if (window.ResizeObserver) {
  var bothrowsSizes = new ResizeObserver(function (entries) {
    entries.forEach(function (entry) {
      var plot = entry.target;
      if (window.Plotly && entry.contentRect.width > 0 && plot.classList.contains("js-plotly-plot"))
        Plotly.Plots.resize(plot);
    });
  });
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll(".bothrows-chart").forEach(function (div) { bothrowsSizes.observe(div); });
  });
}

/* a link to a claim or a table inside a closed fold opens the fold first */
function bothrowsReveal() {
  var id = decodeURIComponent(location.hash.slice(1));
  var target = id && document.getElementById(id);
  if (!target) return;
  var opened = false;
  for (var el = target.parentElement; el; el = el.parentElement)
    if (el.tagName === "DETAILS" && !el.open) { el.open = true; opened = true; }
  if (opened) target.scrollIntoView();
}
window.addEventListener("hashchange", bothrowsReveal);
window.addEventListener("load", bothrowsReveal);
