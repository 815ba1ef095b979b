// The app a Shlink user runs, reduced to its core: Shlink's web component with Shlink's own
// JS SDK as its API client, pointed at the server named in `window.RICOCHET` (set by the page
// drive.mjs serves). The server version comes from `/rest/health`, as Shlink's web client
// does: the component switches features on and off by it.
import { createRoot } from 'react-dom/client';
import { ShlinkWebComponent } from '@shlinkio/shlink-web-component';
import { ShlinkApiClient } from '@shlinkio/shlink-js-sdk';
import { FetchHttpClient } from '@shlinkio/shlink-js-sdk/fetch';

const { baseUrl, apiKey } = window.RICOCHET;
const api = new ShlinkApiClient(new FetchHttpClient(), { baseUrl, apiKey });
const health = await api.health();
createRoot(document.getElementById('root')).render(
  <ShlinkWebComponent serverVersion={health.version} apiClient={api} />,
);
