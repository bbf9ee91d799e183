// Marks <body data-images="loaded|broken"> once every image has finished loading.
(function () {
  function check() {
    var images = Array.prototype.slice.call(document.images);
    if (!images.every(function (i) { return i.complete; })) { setTimeout(check, 50); return; }
    var broken = images.filter(function (i) { return i.naturalWidth === 0; });
    document.body.setAttribute("data-images", broken.length ? "broken" : "loaded");
    broken.forEach(function (i) { i.insertAdjacentHTML("afterend",
      '<p class="problem">This image did not load.</p>'); });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", check);
  } else { check(); }
})();
