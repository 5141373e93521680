"""The HTTP service: one router per feature (:mod:`semdup.service.routers`), admission, the failure throttle, the
server's workers and protocol; composed into the app by :func:`semdup.apps.http.create_app` (``semdup serve``)."""
