/* bothrows: a chart drawn inside a hidden chip tab was laid out at plotly's default
   width; when its tab is shown (a click, or material linking the tabs of the page),
   size every chart of the shown tab to its column. */
document.addEventListener("change", function (event) {
  var input = event.target;
  if (!window.Plotly || !input.matches || !input.matches(".tabbed-set > input")) return;
  var set = input.parentElement;
  var inputs = Array.prototype.slice.call(set.querySelectorAll(":scope > input"));
  var block = set.querySelectorAll(":scope > .tabbed-content > .tabbed-block")[inputs.indexOf(input)];
  if (!block) return;
  block.querySelectorAll(".js-plotly-plot").forEach(function (plot) { Plotly.Plots.resize(plot); });
});
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
