// The page script of cudakit.memory_viz (inlined into every HTML page it writes, so the page
// is self-contained): tooltips, click-to-inspect and the page's render status for tests.
(function(){
var body=document.body;
window.addEventListener('error',function(ev){
  body.setAttribute('data-rendered','error');
  body.setAttribute('data-error',String(ev.message||ev.error));
  var e=document.getElementById('err'); if(e) e.textContent='Script error: '+ev.message;
});
var D=JSON.parse(document.getElementById('ckdata').textContent);
function fmt(n){var u=['B','KiB','MiB','GiB','TiB'],i=0;
  while(Math.abs(n)>=1024&&i<4){n/=1024;i++;} return i?n.toFixed(1)+' '+u[i]:n+' B';}
function stack(id,limit){var s=D.stacks[id]||[],out=[];
  for(var i=0;i<s.length&&i<limit;i++) out.push('  '+D.frames[s[i]]);
  if(s.length>limit) out.push('  ... '+(s.length-limit)+' more frames (click to see all)');
  return out.length?out.join('\n'):'  (no stack recorded: _record_memory_history(context="all"))';}
function allocText(t,k,limit){var a=t.allocs[k];
  return fmt(a[2])+' allocation at '+a[3]+' on stream '+a[4]+'\n'+
   (a[6]?'allocated before recording started':'allocated at event #'+a[0]+' (+'+a[7]+' ms)')+
   ', '+(a[1]<0?'still allocated':'freed at event #'+a[1])+'\n'+stack(a[5],limit);}
function blockText(d,k,limit){var b=d.blocks[k];
  var st={active_allocated:'allocated',active_pending_free:'freed, waiting for stream events',inactive:'free (cached)'}[b[0]]||b[0];
  return fmt(b[1])+' block at '+b[3]+' (offset '+fmt(b[4])+' in its segment): '+st+
   (b[0]==='inactive'?'':'\nrequested '+fmt(b[2]))+'\n'+stack(b[5],limit);}
var tip=document.getElementById('tip'),detail=document.getElementById('detail');
function show(ev,text){tip.textContent=text;tip.style.display='block';
  var x=ev.clientX+14,y=ev.clientY+14,r=tip.getBoundingClientRect();
  if(x+r.width>innerWidth) x=Math.max(0,ev.clientX-r.width-10);
  if(y+r.height>innerHeight) y=Math.max(0,ev.clientY-r.height-10);
  tip.style.left=x+'px';tip.style.top=y+'px';}
function hide(){tip.style.display='none';}
var nAllocs=0,nPolys=0,nBlocks=0;
D.timelines.forEach(function(t){
  var svg=document.querySelector('svg.timeline[data-device="'+t.device+'"]');
  var status=document.getElementById('status'+t.device),cur=svg.querySelector('line.cursor');
  var plot=svg.querySelector('rect.plot'),x0=+plot.getAttribute('x'),pw=+plot.getAttribute('width');
  nAllocs+=t.allocs.length;
  svg.querySelectorAll('polygon.alloc').forEach(function(p){nPolys++;
    var k=+p.getAttribute('data-k');
    p.addEventListener('mousemove',function(ev){show(ev,allocText(t,k,8));});
    p.addEventListener('mouseleave',hide);
    p.addEventListener('click',function(){detail.textContent=allocText(t,k,1e9);});});
  var small=svg.querySelector('polygon.small');
  if(small){small.addEventListener('mousemove',function(ev){show(ev,t.small+
    ' other allocations (smaller or short-lived), merged into one band; the '+t.drawn+
    ' that cover the most of the chart have their own');});
    small.addEventListener('mouseleave',hide);}
  svg.addEventListener('mousemove',function(ev){
    var r=svg.getBoundingClientRect(),x=ev.clientX-r.left,b=Math.floor((x-x0)/pw*t.samples.length);
    if(b<0||b>=t.samples.length){cur.setAttribute('visibility','hidden');return;}
    cur.setAttribute('x1',x);cur.setAttribute('x2',x);cur.setAttribute('visibility','visible');
    status.textContent='event #'+t.samples[b]+': allocated '+fmt(t.total[b])+
      ', reserved '+fmt(t.reserved[b]);});
});
D.segmaps.forEach(function(d){
  var svg=document.querySelector('svg.segments[data-device="'+d.device+'"]');
  svg.querySelectorAll('text.seglabel').forEach(function(l){
    var r=d.rows[+l.getAttribute('data-row')];
    l.addEventListener('mousemove',function(ev){show(ev,'segment at '+r[0]+': '+fmt(r[1])+' ('+r[3]+
      (r[4]?', expandable':'')+'), '+fmt(r[2])+' allocated\nstream '+r[5]+', pool ('+r[6].join(', ')+')'+
      (r[6][0]||r[6][1]?' (private MemPool)':' (default pool)'));});
    l.addEventListener('mouseleave',hide);});
  svg.querySelectorAll('rect.block').forEach(function(r){nBlocks++;
    var k=+r.getAttribute('data-b');
    r.addEventListener('mousemove',function(ev){show(ev,blockText(d,k,8));});
    r.addEventListener('mouseleave',hide);
    r.addEventListener('click',function(){detail.textContent=blockText(d,k,1e9);});});
});
var want=D.segmaps.reduce(function(s,d){return s+d.blocks.length;},0);
if(nBlocks!==want) throw new Error('drew '+nBlocks+' of '+want+' blocks');
var wantPolys=D.timelines.reduce(function(s,t){return s+t.drawn;},0);
if(nPolys!==wantPolys) throw new Error('drew '+nPolys+' of '+wantPolys+' allocation bands');
body.setAttribute('data-allocations',nAllocs);
body.setAttribute('data-blocks',nBlocks);
body.setAttribute('data-bands',nPolys);
if(body.getAttribute('data-rendered')!=='error') body.setAttribute('data-rendered','ok');
})();
