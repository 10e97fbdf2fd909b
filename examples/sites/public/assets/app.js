document.getElementById('route').textContent = 'route: ' + location.pathname;
